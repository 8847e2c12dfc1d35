"""Issue 58 item 1: a NaN pair value never drops a question silently; it is refused as bad input,
one line naming the pair file's line, the column and the question (CLI exit 2)."""
from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from sage.errors import SageInputError
from sage.scoring import score_responses
from tests.fixtures_cli import assert_clean_error, run_sage


def _pair_file(tmp_path, nan_at=None):
    """Two questions of three answers each, every pair once (a complete graph), column `sim`."""
    rows = []
    for qid in ("q1", "q2"):
        answers = [f"{qid} answer {k}" for k in range(3)]
        for a, b in itertools.combinations(answers, 2):
            rows.append({"question_id": qid, "paraphrased_1": f"{a} p", "model_output_1": a, "rot_1": f"{a} r",
                         "paraphrased_2": f"{b} p", "model_output_2": b, "rot_2": f"{b} r", "sim": 0.5})
    df = pd.DataFrame(rows)
    if nan_at is not None:
        df.loc[nan_at, "sim"] = float("nan")
    path = tmp_path / "pairs.csv"
    df.to_csv(path, index=False)
    return path


def test_a_nan_pair_value_is_refused_naming_its_line(tmp_path):
    path = _pair_file(tmp_path, nan_at=4)  # record 4 (0-based) is q2's second pair, file line 6
    with pytest.raises(SageInputError, match=r"line 6: column 'sim' of question q2 is not a finite number"):
        score_responses(path, metrics=("sge",), on=("answer",), sge_edges=("column:sim",), progress=False)


def test_finite_pairs_still_score(tmp_path):
    res = score_responses(_pair_file(tmp_path), metrics=("sge",), on=("answer",), sge_edges=("column:sim",),
                          progress=False)
    assert len(res.questions) == 2


@pytest.mark.slow
def test_cli_repro_exits_2_with_one_line(tmp_path):
    path = _pair_file(tmp_path, nan_at=4)
    proc = run_sage("score", "--responses", path, "--sge-edges", "column:sim", "--metrics",
                    "sge,eigv,degree,eccentricity,kle,num_sets", "--out", tmp_path / "o", "--no-progress")
    assert_clean_error(proc, "line 6", "column 'sim'", "q2")


def test_identical_texts_keep_the_columns_own_values(tmp_path):
    """Issue 58 item 4: three nodes with the same answer (different paraphrases) and column sim 0.3
    give SGE 1 - 0.7 ln 3 = 0.231 (the user's values), not 1.0 (the identical-text override)."""
    rows = [{"question_id": "q", "paraphrased_1": f"p{a}", "model_output_1": "same", "rot_1": "r",
             "paraphrased_2": f"p{b}", "model_output_2": "same", "rot_2": "r", "sim": 0.3}
            for a, b in itertools.combinations(range(3), 2)]
    path = tmp_path / "same.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    res = score_responses(path, metrics=("sge", "degree"), on=("answer",), sge_edges=("column:sim",),
                          progress=False)
    row = res.questions.iloc[0]
    assert row["sge_answer"] == pytest.approx(1.0 - 0.7 * math.log(3), abs=1e-12)
    assert round(row["sge_answer"], 3) == 0.231
    # Degree = (n^2 - sum W) / n^2 with W = 1 on the diagonal and 0.3 off it: (9 - 3 - 1.8) / 9.
    assert row["degree_answer"] == pytest.approx((9 - 3 - 6 * 0.3) / 9, abs=1e-12)
