"""experiments/countermoral_sequential.py's sequential.md on the committed CounterMoral records:
its numbers equal ones computed here from the raw records with numpy."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "countermoral_sequential.py"
RESULTS = REPO / "experiments" / "results" / "countermoral"
RUN = RESULTS / "memit" / "specific-sequential-care_ethics"


def _script():
    spec = importlib.util.spec_from_file_location("countermoral_sequential", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_sequential_comparison_matches_the_records():
    text = _script().comparison(RESULTS)
    section = text.split("## MEMIT, specific care_ethics")[1].split("\n## ")[0]

    single = [r for r in _jsonl(RESULTS / "memit" / "specific" / "entries.jsonl") if r["framework"] == "care_ethics"]
    assert len(single) == 300
    assert f"same 300 entries) | {np.mean([r['reliability'] for r in single]):.3f} |" in section

    edits = _jsonl(RUN / "edits.jsonl")
    assert f"(the published regime) | {np.mean([r['reliability'] for r in edits]):.3f} |" in section

    points = {r["step"]: r for r in _jsonl(RUN / "checkpoints.jsonl")}
    retention = " / ".join(f"{np.mean([v['reliability'] for v in points[s]['per_edit'].values()]):.3f}"
                           for s in (10, 30, 100, 300))
    assert f"at 10 / 30 / 100 / 300 edits | {retention} |" in section
    assert f"{points[300]['drift']['perplexity']:,.2f}." in section  # the collapse: perplexity in the 100,000s

    order = json.loads((RUN / "settings.json").read_text())["order"][:10]
    first = np.mean([points[100]["per_edit"][u]["reliability"] for u in order])
    assert f"{first:.2f} at 100" in section


@pytest.mark.slow
def test_prefill_meets_a_forward_run_in_the_middle(bundled_lm, countermoral_dir, tmp_path):
    """--prefill-unedited walks a sequence backwards and stops at the first entry a forward run
    already scored; what it stores is what the forward run would have computed."""
    from sage.editing.dataset import load_all
    from sage.editing.sequential import planned_order
    from sage.editing.unedited_scores import UneditedScores

    script = _script()
    sequence = planned_order(load_all(countermoral_dir, ["care_ethics"], "broad", 2), 0)
    store = tmp_path / "scores.sqlite"
    forward = UneditedScores(bundled_lm, store)
    forward.get(sequence[0])  # the sequential run's first entry
    backward = UneditedScores(bundled_lm, store)
    assert script.prefill(backward, sequence) == (1, 1)  # the last entry scored, then the first found
    assert script.prefill(backward, sequence) == (0, 1)  # a second prefill stops at once

    later = UneditedScores(bundled_lm, store)
    got = [later.get(r) for r in sequence]
    assert (later.hits, later.misses) == (2, 0)  # the run that follows computes nothing
    assert got[1] == UneditedScores(bundled_lm, tmp_path / "fresh.sqlite").get(sequence[1])
    for u in (forward, backward, later):
        u.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=30), min_size=1, max_size=5))
def test_combine_equals_aggregate_of_the_union(groups):
    """Pooling per-part aggregates gives the aggregate (mean, population std, n) of all rows."""
    from sage.editing.entry_measures import aggregate, combine

    parts = [aggregate([{"x": v} for v in g], ["x"]) for g in groups]
    pooled = combine(parts)["x"]
    every = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    assert pooled["n"] == every.size
    assert np.isclose(pooled["mean"], every.mean(), rtol=0, atol=1e-9)
    assert np.isclose(pooled["std"], every.std(), rtol=0, atol=1e-6)


def _sequential_table4(results: Path) -> str:
    from sage.editing.tables import SEQUENTIAL_TABLE4, tables

    return tables(results, None).split(f"## {SEQUENTIAL_TABLE4} (specific)")[1].split("\n## ")[0]


@pytest.mark.parametrize("method", ["memit", "alphaedit"])
def test_sequential_table4_overall_pools_the_four_framework_runs(method):
    """Table 4 (sequential, as published): a method's overall row, from its four one-framework runs,
    is the mean ± std over all 1,200 edits' records."""
    from sage.editing.dataset import FRAMEWORKS

    rows = [r for fw in FRAMEWORKS for r in _jsonl(RESULTS / method / f"specific-sequential-{fw}" / "edits.jsonl")]
    assert len({r["uid"] for r in rows}) == 1200
    cells = [f"{np.mean([r[k] for r in rows]):.3f} ± {np.std([r[k] for r in rows]):.3f}"
             for k in ("reliability", "action_paraphrase", "relation_paraphrase")]
    assert f"| {method} | overall | " + " | ".join(cells) + " |" in _sequential_table4(RESULTS)


def test_sequential_table4_has_no_overall_row_while_a_framework_is_missing(tmp_path):
    """Three of MEMIT's four framework runs: the frameworks' rows, but no overall (it would read as
    the whole subset's)."""
    from sage.editing.dataset import FRAMEWORKS

    for fw in FRAMEWORKS[:3]:
        run = tmp_path / "memit" / f"specific-sequential-{fw}"
        run.mkdir(parents=True)
        (run / "summary.json").write_bytes((RESULTS / "memit" / run.name / "summary.json").read_bytes())
    section = _sequential_table4(tmp_path)
    assert all(f"| memit | {fw} | " in section for fw in FRAMEWORKS[:3])
    assert f"| memit | {FRAMEWORKS[3]} | " not in section
    assert "| memit | overall | – | – | – |" in section
