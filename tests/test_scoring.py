"""score_responses end to end: per-question columns, undefined questions, skipped rows, summaries."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sage.errors import SageInputError
from sage.metrics.sge import distances_from_similarity, sge_from_distances
from sage.metrics.similarity import RougeLSimilarity, upper_mean
from sage.scoring import ScoreConfig, score_responses

CHEAP = dict(metrics=("sge", "bleu", "rouge_l"), sge_edges=("rouge_l", "bleu"), progress=False)


def _df():
    rows = []
    texts = {
        "q1": ["you should keep your promise", "keep your promise always", "promises can be broken"],
        "q2": ["return the wallet", "return the wallet", "return the wallet"],
        "q3": ["lying is wrong", "lying is sometimes fine"],
    }
    for model in ("m1", "m2"):
        for q, answers in texts.items():
            for i, a in enumerate(answers):
                rows.append({"question_id": q, "model": model, "sample": i, "answer": a, "rot": f"rule {a}"})
    return pd.DataFrame(rows)


def test_columns_and_values_match_direct_computation():
    res = score_responses(_df(), **CHEAP)
    q = res.questions
    assert list(q[["model", "question_id"]].itertuples(index=False, name=None))[:3] == [("m1", "q1"), ("m1", "q2"), ("m1", "q3")]
    for col in ("sge_answer", "D_answer", "H_answer", "meansim_answer", "sge_bleu_answer", "bleu_answer",
                "rouge_l_answer", "sge_rot", "bleu_rot"):
        assert col in q.columns
    texts = _df().query("model == 'm1' and question_id == 'q1'")["answer"].tolist()
    sim = RougeLSimilarity().matrices([texts])[0]
    row = q[(q.model == "m1") & (q.question_id == "q1")].iloc[0]
    assert row["sge_answer"] == pytest.approx(sge_from_distances(distances_from_similarity(sim)).sge)
    assert row["rouge_l_answer"] == pytest.approx(upper_mean(sim))
    # identical answers: SGE = 1 whatever the edge similarity
    q2 = q[q.question_id == "q2"]
    assert np.allclose(q2["sge_answer"], 1.0) and np.allclose(q2["sge_bleu_answer"], 1.0)


def test_summary_has_ci_counts_and_provenance(tmp_path):
    res = score_responses(_df(), **CHEAP)
    s = res.summary
    m = s["models"]["m1"]
    assert m["n_questions"] == 3 and m["n_undefined"] == 0 and m["n_rows"] == 8
    ci = m["metrics"]["sge_answer"]
    assert ci["ci_low"] <= ci["mean"] <= ci["ci_high"] and ci["n"] == 3
    assert s["provenance"]["seed"] == 0 and "numpy" in s["provenance"]["versions"]
    out = res.write(tmp_path / "run")
    assert pd.read_csv(out / "questions.csv").shape[0] == 6
    assert len(pd.read_csv(out / "responses.csv")) == len(_df())
    assert json.loads((out / "summary.json").read_text())["config"]["sge_edges"] == ["rouge_l", "bleu"]
    md = (out / "summary.md").read_text()
    assert "| m1 | 3 |" in md and "SGE (answer)" in md


def test_single_row_question_is_an_error_unless_skipped():
    df = pd.concat([_df(), pd.DataFrame([{"question_id": "q9", "model": "m1", "sample": 0, "answer": "alone", "rot": "r"}])])
    with pytest.raises(SageInputError, match="question_id 'q9'.*single row"):
        score_responses(df, **CHEAP)
    res = score_responses(df, skip_invalid=True, **CHEAP)
    m = res.summary["models"]["m1"]
    assert m["n_undefined"] == 1 and m["n_questions_scored"] == 3
    assert res.summary["undefined_questions"] == [{"model": "m1", "question_id": "q9"}]
    # the undefined question does not move the aggregate
    base = score_responses(_df(), **CHEAP).summary["models"]["m1"]["metrics"]["sge_answer"]["mean"]
    assert m["metrics"]["sge_answer"]["mean"] == pytest.approx(base)


def test_nan_answers_are_counted_when_skipped():
    df = _df()
    df.loc[0, "answer"] = np.nan
    df.loc[4, "answer"] = ""
    with pytest.raises(SageInputError, match="row 1: column 'answer' is empty or NaN.*1 more"):
        score_responses(df, **CHEAP)
    res = score_responses(df, skip_invalid=True, **CHEAP)
    assert res.summary["skipped_rows"] == [1, 5]
    assert res.summary["models"]["m1"]["n_skipped_rows"] == 2
    assert res.questions.query("model == 'm1' and question_id == 'q1'")["n"].item() == 2


def test_chunking_does_not_change_results():
    whole = score_responses(_df(), **CHEAP).questions
    chunked = score_responses(_df(), chunk_questions=1, **CHEAP).questions
    pd.testing.assert_frame_equal(whole, chunked)


def test_bad_config_names():
    with pytest.raises(SageInputError, match="unknown metric 'blue'"):
        ScoreConfig(metrics=("blue",))
    with pytest.raises(SageInputError, match="unknown SGE edge similarity"):
        ScoreConfig(sge_edges=("jaccard",))
    with pytest.raises(SageInputError, match="missing column 'rot'"):
        score_responses(_df().drop(columns="rot"), on=("answer", "rot"), **CHEAP)


@pytest.mark.slow
def test_model_based_metrics_on_quality100_subset(quality100):
    from sage.data.responses import read_responses

    df = read_responses(quality100 / "q100_gpt_3.5_rot.csv")
    df = df[df["question_id"].isin(df["question_id"].unique()[:6])]
    res = score_responses(df, sge_edges=("cosine", "bertscore"), progress=False)
    q = res.questions
    assert len(q) == 6
    # cosine baseline equals the mean similarity of the cosine graph (same embeddings, all pairs)
    np.testing.assert_allclose(q["cosine_answer"], q["meansim_answer"], atol=1e-6)
    assert q["bertscore_answer"].between(0, 1).all() and q["sge_bertscore_answer"].notna().all()
    t = res.summary["timings_seconds"]
    assert 0 < t["model_forward"] < t["total"]
