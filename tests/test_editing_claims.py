"""experiments/countermoral_claims.py on the committed CounterMoral records: its paired
MEMIT − AlphaEdit difference equals one computed here with numpy alone."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "countermoral_claims.py"
RESULTS = REPO / "experiments" / "results" / "countermoral"


def _claims():
    spec = importlib.util.spec_from_file_location("countermoral_claims", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _by_uid(method: str, run: str) -> dict:
    lines = (RESULTS / method / run / "entries.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["uid"]: row for row in map(json.loads, lines)}


def test_editing_claims_paired_difference_matches_numpy():
    claims = _claims()
    memit, alpha = _by_uid("memit", "specific"), _by_uid("alphaedit", "specific")
    uids = sorted(memit)
    assert sorted(alpha) == uids and len(uids) == 1200
    expected = np.mean([memit[u]["relation_paraphrase"] - alpha[u]["relation_paraphrase"] for u in uids])

    (row,) = claims.paired(RESULTS, "memit", "alphaedit", "specific", ("relation_paraphrase",))
    assert row["n"] == 1200
    assert np.isclose(row["diff"], expected, rtol=0, atol=1e-12)
    assert row["diff"] > 0.01 and row["p"] < 1e-15  # the README's "higher by 0.016, p = 3e-20"

    text = claims.report(RESULTS, None)  # no published numbers needed for this part
    assert f"| specific | relation_paraphrase | 1200 | {np.mean([memit[u]['relation_paraphrase'] for u in uids]):.4f}" in text
    assert f"{expected:+.4f}" in text


def test_editing_claims_sequential_ranking_pools_the_four_frameworks(countermoral_dir):
    """MEMIT's published numbers come from sequential editing (EasyEdit `edit()`, nothing restored):
    the ranking variant for that regime pools the four frameworks' per-edit records, and its MEMIT
    mean and published overall equal ones computed here from the files."""
    claims = _claims()
    assert claims.has_sequential(RESULTS, "memit")
    rows = []
    for fw in claims.FRAMEWORKS:
        path = RESULTS / "memit" / f"specific-sequential-{fw}" / "edits.jsonl"
        rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) == len({r["uid"] for r in rows}) == 1200
    ours = np.mean([r["relation_paraphrase"] for r in rows])
    pub = json.loads((countermoral_dir / "published-results-gpt2-xl" / "memit.json").read_text())["results"]
    theirs = np.mean([pub[fw.upper()]["all-actions"]["edited"]["AGS"]["generalization_relation_paraphrase"]["mean"]
                      for fw in claims.FRAMEWORKS])

    r = claims.ranking(RESULTS, countermoral_dir, "specific", sequential=("memit",))
    i = r["methods"].index("memit")
    assert np.isclose(r["ours"][i], ours, rtol=0, atol=1e-12)
    assert np.isclose(r["published"][i], theirs, rtol=0, atol=1e-12)
    batch = claims.ranking(RESULTS, countermoral_dir, "specific")  # the same methods, MEMIT from its batch run
    assert [o for j, o in enumerate(batch["ours"]) if j != i] == [o for j, o in enumerate(r["ours"]) if j != i]
    assert "with MEMIT's sequential runs (the authors' regime)" in claims.report(RESULTS, countermoral_dir)


def test_grace_value_steps_probe_reproduces_table1_and_learns_at_50():
    """The README's GRACE claim: under replace_last at 25 steps exactly two Table 1 edits miss a
    target token; the probe (experiments/grace_value_steps.py) re-edits them and reproduces their
    records (within float32 rounding), and 50 steps learn both."""
    table1 = _by_uid("grace", "specific")
    short = sorted(u for u, r in table1.items() if r["reliability"] < 1)
    assert short == ["UTILITARIANISM_34_", "UTILITARIANISM_43_"]
    rows = [json.loads(line) for line in
            (REPO / "experiments/results/grace_value_steps/steps.jsonl").read_text(encoding="utf-8").splitlines()]
    probe = {(r["uid"], r["replacement"], r["steps"]): r for r in rows}
    for uid in short:
        at25 = probe[(uid, "replace_last", 25)]
        # the sweep scores the edit prompt batched with the entry's other prompts: float32 rounding
        assert np.isclose(at25["p_new"], table1[uid]["post_p_new"], rtol=1e-4, atol=0)
        assert at25["token_acc"] == table1[uid]["reliability"] < 1
        assert probe[(uid, "replace_last", 50)]["token_acc"] == 1.0
        assert probe[(uid, "from_key", 25)]["token_acc"] == 1.0
