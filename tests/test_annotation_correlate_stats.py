"""Correlation machinery: vectorised statistics against scipy, designed human consistency with known
correlations, bootstrap CIs, the paired bootstrap test and the definitions of human consistency."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from test_annotation_data import designed_questions

from sage.annotation.correlation import (
    CorrelationSettings,
    _kendall_rows,
    _pearson_rows,
    _spearman_rows,
    correlation_markdown,
    human_consistency,
    metric_columns,
    paired_difference,
    run_correlation,
)
from sage.errors import SageInputError

finite = st.floats(-5, 5, allow_nan=False).map(lambda v: round(v, 2))  # rounding makes ties likely


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=3, max_size=25))
def test_row_statistics_equal_scipy(xy):
    x, y = (np.array(v, float) for v in zip(*xy))
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        assert np.isnan(_pearson_rows(x[None], y[None])[0])
        return
    assert _pearson_rows(x[None], y[None])[0] == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-9)
    assert _spearman_rows(x[None], y[None])[0] == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-9)
    assert _kendall_rows(x[None], y[None])[0] == pytest.approx(stats.kendalltau(x, y)[0], abs=1e-9)


def test_kendall_rows_chunking_matches_scipy():
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 5, size=(300, 120)).astype(float), rng.random((300, 120))
    got = _kendall_rows(x, y)
    for r in (0, 150, 299):
        assert got[r] == pytest.approx(stats.kendalltau(x[r], y[r])[0], abs=1e-12)


def _questions(truth, **metrics):
    q = pd.DataFrame({"model": "m", "question_id": list(truth), "n": 5})
    h = np.array(list(truth.values()))
    for name, fn in metrics.items():
        q[name] = fn(h)
    return q


def test_designed_labels_give_known_correlations():
    labels, meta, truth = designed_questions(n_questions=11)
    rng = np.random.default_rng(4)
    noise = rng.random(11)
    q = _questions(truth, sge_answer=lambda h: h ** 2, bleu_answer=lambda h: -h, cosine_answer=lambda h: noise,
                   D_answer=lambda h: h)
    res = run_correlation(labels, meta, q, CorrelationSettings(n_boot=300, seed=1))
    assert res["metrics"] == ["sge_answer", "bleu_answer", "cosine_answer"]  # D_ is not a default metric
    h = np.array(list(truth.values()))
    human = pd.DataFrame(res["human"]).set_index("question_id")["human"]
    assert all(human[k] == pytest.approx(v) for k, v in truth.items())
    by = {(r["metric"], r["method"]): r for r in res["correlations"]}
    assert by["sge_answer", "spearman"]["r"] == pytest.approx(1.0)
    assert by["sge_answer", "kendall"]["r"] == pytest.approx(1.0)
    assert by["sge_answer", "pearson"]["r"] == pytest.approx(np.corrcoef(h, h ** 2)[0, 1])
    assert by["bleu_answer", "spearman"]["r"] == pytest.approx(-1.0)
    assert by["cosine_answer", "pearson"]["r"] == pytest.approx(np.corrcoef(h, noise)[0, 1])
    assert by["sge_answer", "spearman"]["ci95_low"] == pytest.approx(1.0)  # every resample is monotone
    assert by["sge_answer", "spearman"]["n_boot_undefined"] >= 0
    comp = {(d["metric_a"], d["metric_b"]): d for d in res["comparisons"]}
    d = comp["sge_answer", "bleu_answer"]
    assert d["difference"] == pytest.approx(2.0) and d["p_value"] < 0.01 and d["ci95_low"] > 1.5
    md = correlation_markdown(res)
    assert "| spearman | 1.000" in md and "sge_answer" in md


def test_bootstrap_ci_covers_population_correlation():
    rng = np.random.default_rng(7)
    n, rho = 400, 0.6
    z = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n)
    joined = pd.DataFrame({"human": z[:, 0], "m1": z[:, 1], "m2": z[:, 1] + rng.normal(0, 3, n)})
    from sage.annotation.correlation import correlate

    recs, _ = correlate(joined, ["m1"], ("pearson",), n_boot=500, seed=0)
    assert recs[0]["ci95_low"] < rho < recs[0]["ci95_high"]
    assert recs[0]["ci95_high"] - recs[0]["ci95_low"] < 0.2
    d = paired_difference(joined, "m1", "m2", "pearson", n_boot=500, seed=0)
    assert d["difference"] > 0.3 and d["p_value"] < 0.01
    same = paired_difference(joined, "m1", "m1", "spearman", n_boot=200, seed=0)
    assert same["difference"] == 0 and same["p_value"] == 1.0


def test_human_consistency_definitions():
    meta = pd.DataFrame({"pair_id": ["p1", "p2"], "model": "m", "question_id": "q", "kind": "answer"})
    labels = pd.DataFrame({"pair_id": ["p1", "p1", "p1", "p2", "p2", "p2"], "annotator": ["a", "b", "c"] * 2,
                           "label": ["entailment", "entailment", "neutral", "contradiction", "neutral", "neutral"]})

    def h(**kw):
        return float(human_consistency(labels, meta, **kw)["human"].iloc[0])

    assert h(definition="entail") == pytest.approx((2 / 3 + 0) / 2)
    assert h(definition="not-contradict") == pytest.approx((1 + 2 / 3) / 2)
    assert h(definition="graded") == pytest.approx(((1 + 1 + 0.5) / 3 + (0 + 0.5 + 0.5) / 3) / 2)
    assert h(definition="entail", aggregate="majority") == pytest.approx(0.5)  # p1 -> entailment, p2 -> neutral
    assert h(definition="not-contradict", aggregate="majority") == pytest.approx(1.0)
    tie = labels.iloc[[0, 2]]  # p1: entailment vs neutral, a tie
    assert float(human_consistency(tie, meta, "graded", "majority")["human"].iloc[0]) == pytest.approx(0.75)
    rot = meta.assign(kind="rot")
    with pytest.raises(SageInputError, match="no labelled answer pairs"):
        human_consistency(labels, rot)


def test_equal_shares_tie_exactly():
    """13/30 reached through different float sums must tie, or rank correlations change."""
    meta = pd.DataFrame({"pair_id": [f"p{i}" for i in range(20)], "model": "m",
                         "question_id": ["q1"] * 10 + ["q2"] * 10, "kind": "answer"})
    rows = []
    for i in range(20):
        n_ent = ([1, 1, 1, 2, 2, 1, 1, 2, 1, 1] if i < 10 else [2, 2, 1, 1, 1, 1, 1, 1, 2, 1])[i % 10]
        rows += [{"pair_id": f"p{i}", "annotator": f"a{a}", "label": "entailment" if a < n_ent else "neutral"}
                 for a in range(3)]
    h = human_consistency(pd.DataFrame(rows), meta)["human"].tolist()
    assert h[0] == h[1] == round(13 / 30, 12)


def test_errors_name_the_problem():
    labels, meta, truth = designed_questions(n_questions=6)
    q = _questions(truth, sge_answer=lambda h: h)
    with pytest.raises(SageInputError, match="no metric columns match"):
        metric_columns(q.drop(columns=["sge_answer"]))
    with pytest.raises(SageInputError, match="none of the labelled questions are in the run"):
        run_correlation(labels, meta, q.assign(question_id="other" + q.question_id), CorrelationSettings(n_boot=10))
    with pytest.raises(SageInputError, match="missing column 'model'"):
        run_correlation(labels, meta, q.drop(columns=["model"]), CorrelationSettings(n_boot=10))
    with pytest.raises(SageInputError, match=">= 99 labelled pairs"):
        run_correlation(labels, meta, q, CorrelationSettings(n_boot=10, min_pairs=99))
    with pytest.raises(SageInputError, match="no column 'bleu_answer'"):
        run_correlation(labels, meta, q, CorrelationSettings(n_boot=10, comparisons=(("sge_answer", "bleu_answer"),)))


def test_partial_runs_counted():
    labels, meta, truth = designed_questions(n_questions=8)
    q = _questions(truth, sge_answer=lambda h: h).iloc[:6]
    q.loc[0, "sge_answer"] = np.nan
    res = run_correlation(labels, meta, q, CorrelationSettings(n_boot=50, methods=("spearman",)))
    assert res["counts"]["labelled_questions_not_in_run"] == 2 and res["counts"]["questions_joined"] == 6
    assert res["correlations"][0]["n_questions"] == 5 and res["correlations"][0]["n_missing_metric"] == 1
