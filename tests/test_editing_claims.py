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
    assert row["diff"] > 0.01 and row["p"] < 1e-15  # the README's "higher by 0.017, p = 7e-21"

    text = claims.report(RESULTS, None)  # no published numbers needed for this part
    assert f"| specific | relation_paraphrase | 1200 | {np.mean([memit[u]['relation_paraphrase'] for u in uids]):.4f}" in text
    assert f"{expected:+.4f}" in text
