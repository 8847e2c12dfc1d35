"""Issue 55 §5: every CounterMoral table carries the teacher-forced exact-match shares (all-or-nothing) beside
the partial-credit token accuracy, read from the committed records and checked here against numpy means of the
raw per-entry records."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sage.editing.tables import EXACT_COLUMNS, tables

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "experiments" / "results" / "countermoral"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _sections(text: str) -> dict[str, str]:
    return {part.split("\n", 1)[0]: part for part in text.split("\n## ")[1:]}


def test_every_table_has_the_exact_match_columns():
    text = tables(RESULTS, None)
    sections = _sections(text)
    assert len(sections) >= 5
    for title, body in sections.items():
        header = next(line for line in body.splitlines() if line.startswith("| Method") and "exact" in line)
        assert header, title


def test_table1_exact_match_equals_the_records():
    rows = _jsonl(RESULTS / "memit" / "specific" / "entries.jsonl")
    assert len(rows) == 1200
    body = _sections(tables(RESULTS, None))["Table 1: specific actions (300 per framework, one edit at a time)"]
    damage = body.split("### (b)")[1]
    line = next(x for x in damage.splitlines() if x.startswith("| memit |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    exact = cells[5:8]
    for (key, _), cell in zip(EXACT_COLUMNS, exact):
        post = float(np.mean([r[key] for r in rows]))
        assert cell == f"{np.mean([r['pre_' + key] for r in rows]):.3f} → {post:.3f}"
        assert post <= float(np.mean([r[key.removesuffix("_exact")] for r in rows]))  # never above partial credit
