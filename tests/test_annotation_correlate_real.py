"""End to end on real SaGE data (quality100 answers): `sage score` -> `sage annotate export` -> annotators
who judge pairs by their ROUGE-L overlap -> `sage correlate` -> `sage report`.

Human consistency of a question is then the share of its pairs above the median ROUGE-L, so it must
correlate strongly with the per-question mean ROUGE-L the scorer reports.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fixtures_cli import run_sage


def _sage(*args):
    proc = run_sage(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_score_annotate_correlate_report(quality100, tmp_path):
    from rouge_score import rouge_scorer

    df = pd.read_csv(quality100 / "q100_gpt_3.5_rot.csv")
    df = df[df.question_id.isin(df.question_id.unique()[:10])]
    df.to_csv(tmp_path / "q10.csv", index=False)
    run = tmp_path / "run"
    _sage("score", "--responses", tmp_path / "q10.csv", "--out", run, "--metrics", "sge,bleu,rouge_l",
          "--sge-edges", "cosine", "--n-boot", "200", "--no-progress")
    # `sage correlate` rebuilds the pairs from the responses.csv that `sage score` wrote into the run.
    written = pd.read_csv(run / "responses.csv")
    assert len(written) == len(df) and set(written.model) == {"q10"}
    assert sorted(zip(written.question_id, written.answer)) == sorted(zip(df.question_id, df.model_output))
    _sage("annotate", "export", tmp_path / "q10.csv", "--out", tmp_path / "exp", "--seed", "1")
    pairs = pd.read_csv(tmp_path / "exp" / "pairs.csv", dtype=str, keep_default_na=False)
    assert len(pairs) == 100 and set(pairs.model) == {"q10"}
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    rouge = np.array([scorer.score(a, b)["rougeL"].fmeasure for a, b in zip(pairs.text_a, pairs.text_b)])
    high = rouge >= np.median(rouge)
    rng = np.random.default_rng(0)
    for name, flip in (("r1", 0.0), ("r2", 0.0), ("r3", 0.1)):
        noisy = high ^ (rng.random(len(high)) < flip)
        pairs[name] = np.where(noisy, "entailment", "contradiction")
    pairs.to_csv(tmp_path / "filled.csv", index=False)
    _sage("correlate", run, "--labels", tmp_path / "filled.csv", "--n-boot", "200", "--definition", "entail")
    res = json.loads((run / "correlation" / "correlation.json").read_text())
    by = {(r["metric"], r["method"]): r for r in res["correlations"]}
    assert res["counts"]["questions_joined"] == 10
    # Independent reference: per-question share of high-ROUGE pairs (mean over the three annotators).
    labels = pairs[["question_id", "r1", "r2", "r3"]].copy()
    share = labels.set_index("question_id").eq("entailment").sum(axis=1).groupby(level=0).sum() / 30  # exact ties
    q = pd.read_csv(run / "questions.csv", dtype={"question_id": str}).set_index("question_id")
    from scipy.stats import spearmanr

    ref = spearmanr(share.loc[q.index], q["rouge_l_answer"]).statistic
    assert by["rouge_l_answer", "spearman"]["r"] == pytest.approx(ref, abs=1e-9)
    assert ref > 0.5
    _sage("report", run)
    page = (run / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3


def test_labels_of_one_class_say_why_and_write_null(quality100, tmp_path):
    """Issue 29, item 9: labels that are all one class make every correlation undefined; the command
    says why in one warning line, and correlation.json is strict JSON with null (no bare NaN)."""
    df = pd.read_csv(quality100 / "q100_gpt_3.5_rot.csv")
    df = df[df.question_id.isin(df.question_id.unique()[:6])]
    df.to_csv(tmp_path / "q6.csv", index=False)
    run = tmp_path / "run"
    _sage("score", "--responses", tmp_path / "q6.csv", "--out", run, "--metrics", "sge,bleu", "--sge-edges", "bleu",
          "--n-boot", "50", "--no-progress")
    _sage("annotate", "export", tmp_path / "q6.csv", "--out", tmp_path / "exp", "--seed", "1")
    pairs = pd.read_csv(tmp_path / "exp" / "pairs.csv", dtype=str, keep_default_na=False)
    for name in ("r1", "r2"):
        pairs[name] = "entailment"
    pairs.to_csv(tmp_path / "filled.csv", index=False)
    proc = _sage("correlate", run, "--labels", tmp_path / "filled.csv", "--n-boot", "50")
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "all one class" in warnings[0] and "null" in warnings[0]
    text = (run / "correlation" / "correlation.json").read_text()

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    res = json.loads(text, parse_constant=refuse)
    assert res["correlations"] and all(r["r"] is None for r in res["correlations"])
    assert res["warnings"] == [warnings[0].removeprefix("warning: ")]
