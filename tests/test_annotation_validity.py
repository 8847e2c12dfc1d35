"""Validity diagnostics of `sage correlate`: pair-level AUROC/Spearman of every edge similarity,
redundancy of SGE with the mean similarity of its own edges, and the metric ranking with paired
tests, on synthetic labels with known answers; then end to end through the CLI."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fixtures_cli import run_sage
from hypothesis import given, settings
from hypothesis import strategies as st

from sage.annotation.validity import (
    auroc,
    oriented,
    pair_validity,
    pair_values,
    ranking,
    redundancy,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=2, max_size=40))
def test_auroc_equals_sklearn(data):
    from sklearn.metrics import roc_auc_score

    scores = np.array([s for s, _ in data], float)  # few distinct values: many ties
    y = np.array([b for _, b in data])
    if y.all() or not y.any():
        assert np.isnan(auroc(scores, y))
        return
    assert auroc(scores, y) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)


def _pairs(n_questions=30, per_question=6, seed=0):
    """Pair labels (3 annotators) and an edges table with similarities of known quality."""
    rng = np.random.default_rng(seed)
    labels, meta, edges = [], [], []
    for q in range(n_questions):
        for k in range(per_question):
            pid = f"answer-{q}-{k}"
            votes = rng.integers(0, 2, size=3)  # 1 = entailment
            meta.append({"pair_id": pid, "model": "m", "question_id": f"Q{q}", "kind": "answer"})
            labels += [{"pair_id": pid, "annotator": f"a{a}", "label": "entailment" if v else "contradiction"}
                       for a, v in enumerate(votes)]
            value = votes.mean()
            edges.append({"model": "m", "question_id": f"Q{q}", "kind": "answer", "pair_id": pid,
                          "perfect": value, "inverse": 1 - value, "noise": rng.random(),
                          "nli_p_entailment_ab": 0.3, "nli_equivalent": True})
    return pd.DataFrame(labels), pd.DataFrame(meta), pd.DataFrame(edges)


def test_pair_values_mean_and_majority():
    labels, meta, _ = _pairs(2, 3)
    pv = pair_values(labels, meta)
    ref = labels.assign(v=labels.label.eq("entailment").astype(float)).groupby("pair_id")["v"].mean()
    np.testing.assert_allclose(pv.set_index("pair_id")["value"].loc[ref.index], ref.round(12))
    maj = pair_values(labels, meta, aggregate="majority").set_index("pair_id")["value"]
    assert set(maj) <= {0.0, 1.0} and (maj.loc[ref.index] == (ref > 0.5).astype(float)).all()


def test_pair_validity_known_answers():
    labels, meta, edges = _pairs()
    res = {r["similarity"]: r for r in pair_validity(edges, pair_values(labels, meta), n_boot=300, seed=1)}
    assert set(res) == {"perfect", "inverse", "noise"}  # directional and flag columns are not similarities
    assert res["perfect"]["auroc"] == 1.0 and res["perfect"]["spearman"] == pytest.approx(1.0)
    assert res["perfect"]["auroc_ci95"] == [1.0, 1.0]
    assert res["inverse"]["auroc"] == 0.0 and res["inverse"]["spearman"] == pytest.approx(-1.0)
    lo, hi = res["noise"]["auroc_ci95"]
    assert lo < res["noise"]["auroc"] < hi and 0.3 < res["noise"]["auroc"] < 0.7
    r = res["perfect"]
    assert r["n_pairs"] == 180 and r["n_tied"] == 0 and r["n_consistent"] + r["n_inconsistent"] == 180
    assert r["n_questions"] == 30


def _questions(n=40, seed=3):
    rng = np.random.default_rng(seed)
    human = rng.random(n)
    mean = human + rng.normal(0, 0.3, n)
    q = pd.DataFrame({"model": "m", "question_id": [f"Q{i}" for i in range(n)], "n": 5,
                      "meansim_answer": mean, "sge_answer": 2 * mean - 1,  # SGE a monotone function of the mean
                      "sge_nli_answer": human, "meansim_nli_answer": rng.random(n),
                      "se_answer": -human + rng.normal(0, 0.05, n), "bleu_answer": rng.random(n)})
    return q, q[["model", "question_id"]].assign(human=human)


def test_redundancy_flags_an_sge_that_only_repeats_the_mean():
    q, h = _questions()
    joined = h.merge(q, on=["model", "question_id"])
    res = {r["sge"]: r for r in redundancy(q, joined, n_boot=300)}
    assert res["sge_answer"]["meansim"] == "meansim_answer"
    assert res["sge_answer"]["r_sge_meansim"] == pytest.approx(1.0)
    assert res["sge_answer"]["difference"] == pytest.approx(0.0, abs=1e-12)
    assert res["sge_nli_answer"]["r_sge_human"] == pytest.approx(1.0)
    assert res["sge_nli_answer"]["difference"] > 0.5 and res["sge_nli_answer"]["p_value"] < 0.05


def test_ranking_orients_entropies_and_tests_against_the_best():
    q, h = _questions()
    joined = h.merge(q, on=["model", "question_id"])
    rows, vs_sge = ranking(joined, ["sge_answer", "se_answer", "bleu_answer", "sge_nli_answer"], n_boot=300)
    assert [r["metric"] for r in rows][:2] == ["sge_nli_answer", "se_answer"]
    assert vs_sge["best"] == "sge_nli_answer" and vs_sge["sge"] == "sge_answer" and vs_sge["p_value"] < 0.05
    assert oriented("eigv_answer") == oriented("kle_nli_rot") == oriented("num_sets_answer") == -1
    assert oriented("se_answer") == -1 and oriented("n_clusters_judge_rot") == -1 and oriented("sge_answer") == 1
    by = {r["metric"]: r for r in rows}
    assert by["se_answer"]["r"] > 0.9  # negated: lower entropy = more consistent
    assert by["bleu_answer"]["difference_from_best"] < 0 and by["bleu_answer"]["p_value"] < 0.05
    assert "difference_from_best" not in by["sge_nli_answer"]


def _word_answers(path, rng, *, n_questions, n_words, per_question, drift, levels):
    """A responses table whose questions differ in how much their answers drift from one base text."""
    words = "honesty trust lie truth friend promise keep break kind harm fair rule help owe".split()
    rows = []
    for q in range(n_questions):
        base = list(rng.choice(words, n_words))
        for p in range(per_question):
            text = [w if rng.random() > drift * (q % levels) else str(rng.choice(words)) for w in base]
            rows.append({"question_id": f"q{q}", "question": f"Question {q}?", "paraphrase_id": p,
                         "answer": " ".join(text)})
    pd.DataFrame(rows).to_csv(path, index=False)


def test_sage_correlate_prints_pair_level_redundancy_and_ranking_tables(tmp_path):
    """Real files end to end: score (lexical edges) -> synthetic labels that follow ROUGE-L -> correlate."""
    rng = np.random.default_rng(0)
    _word_answers(tmp_path / "r.csv", rng, n_questions=12, n_words=6, per_question=4, drift=0.15, levels=4)
    run = tmp_path / "run"
    proc = run_sage("score", "--responses", tmp_path / "r.csv", "--metrics", "sge,bleu,rouge_l",
                    "--sge-edges", "rouge_l,bleu", "--n-boot", "50", "--no-progress", "--out", run)
    assert proc.returncode == 0, proc.stderr[-2000:]
    edges = pd.read_csv(run / "edges.csv")
    assert len(edges) == 12 * 6 and {"rouge_l", "bleu", "pair_id"} <= set(edges.columns)
    cut = np.median(edges["rouge_l"])
    labels = edges[["pair_id"]].copy()
    for a, flip in (("ann1", 0.0), ("ann2", 0.0), ("ann3", 0.2)):
        consistent = (edges["rouge_l"] > cut) ^ (rng.random(len(edges)) < flip)
        labels[a] = np.where(consistent, "Y", "N")
    labels.to_csv(tmp_path / "labels.csv", index=False)
    proc = run_sage("correlate", run, "--labels", tmp_path / "labels.csv", "--n-boot", "200")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for heading in ("Pair-level validity", "Redundancy: SGE", "Metrics ranked by agreement"):
        assert heading in proc.stdout
    v = json.loads((run / "correlation" / "correlation.json").read_text())["validity"]
    pairs = {r["similarity"]: r for r in v["pairs"]}
    assert pairs["rouge_l"]["auroc"] > 0.9 and pairs["rouge_l"]["n_pairs"] == 72
    assert pairs["rouge_l"]["auroc"] >= pairs["bleu"]["auroc"] - 0.1
    red = {r["sge"]: r for r in v["redundancy"]}
    assert set(red) == {"sge_answer", "sge_bleu_answer"} and -1 <= red["sge_answer"]["r_sge_meansim"] <= 1
    assert {r["metric"] for r in v["ranking"]} == {"sge_answer", "sge_bleu_answer", "bleu_answer", "rouge_l_answer"}
    assert "correlation with human" in (run / "correlation" / "correlation.md").read_text()


def test_sage_correlate_ranks_every_graph_measure_with_cis_pearson_edge_auroc_and_a_test_against_sge(tmp_path):
    """A run with every graph measure on two edges, a label file built here (labels follow ROUGE-L),
    then `sage correlate`: each measure ranked with Spearman and its CI, Pearson, its edge's
    pair-level AUROC, and the best measure tested against SGE; every number recomputed here."""
    from scipy import stats

    rng = np.random.default_rng(1)
    _word_answers(tmp_path / "r.csv", rng, n_questions=16, n_words=7, per_question=5, drift=0.12, levels=5)
    run = tmp_path / "run"
    measures = "sge,num_sets,eigv,degree,eccentricity,kle,bleu,rouge_l"
    proc = run_sage("score", "--responses", tmp_path / "r.csv", "--metrics", measures, "--sge-edges", "bleu,rouge_l",
                    "--n-boot", "50", "--no-progress", "--out", run)
    assert proc.returncode == 0, proc.stderr[-2000:]
    edges = pd.read_csv(run / "edges.csv")
    cut = np.median(edges["rouge_l"])
    labels = edges[["pair_id"]].copy()
    for a, flip in (("ann1", 0.05), ("ann2", 0.1), ("ann3", 0.2)):
        labels[a] = np.where((edges["rouge_l"] > cut) ^ (rng.random(len(edges)) < flip), "Y", "N")
    labels.to_csv(tmp_path / "labels.csv", index=False)
    proc = run_sage("correlate", run, "--labels", tmp_path / "labels.csv", "--n-boot", "300")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Metrics ranked by agreement with people" in proc.stdout and "Best measure against SGE" in proc.stdout
    out = json.loads((run / "correlation" / "correlation.json").read_text())
    v = out["validity"]
    q = pd.read_csv(run / "questions.csv", dtype={"question_id": str})
    human = pd.DataFrame(out["human"]).merge(q, on=["model", "question_id"])
    ranked = [r["metric"] for r in v["ranking"]]
    expected = {f"{m}_answer" for m in ("sge", "num_sets", "eigv", "degree", "eccentricity", "kle", "bleu", "rouge_l")}
    expected |= {f"{m}_rouge_l_answer" for m in ("sge", "num_sets", "eigv", "degree", "eccentricity", "kle")}
    assert expected <= set(ranked)
    finite = [r["r"] for r in v["ranking"] if np.isfinite(r["r"])]
    assert finite == sorted(finite, reverse=True)
    auc = {p["similarity"]: p["auroc"] for p in v["pairs"]}
    for r in v["ranking"]:
        sign = -1 if r["metric"].split("_")[0] in ("num", "eigv", "degree", "eccentricity", "kle") else 1
        assert r["orientation"] == sign
        x, h = sign * human[r["metric"]].to_numpy(float), human["human"].to_numpy(float)
        if np.ptp(x) == 0:
            continue
        assert r["r"] == pytest.approx(stats.spearmanr(x, h)[0], abs=1e-12)
        assert r["pearson"] == pytest.approx(stats.pearsonr(x, h)[0], abs=1e-12)
        assert r["r_ci95"][0] <= r["r"] + 1e-9 and r["pearson_ci95"][0] <= r["pearson_ci95"][1]
        edge = "rouge_l" if "rouge_l" in r["metric"] else "bleu"
        assert r["edge"] == edge and r["edge_auroc"] == pytest.approx(auc[edge])
    b = v["best_vs_sge"]
    assert b["best"] == ranked[0] and b["sge"] == "sge_answer"
    if "note" not in b:
        by = {r["metric"]: r for r in v["ranking"]}
        assert b["difference"] == pytest.approx(by[b["best"]]["r"] - by["sge_answer"]["r"], abs=1e-12)
        assert b["ci95"][0] <= b["ci95"][1] and 0 < b["p_value"] <= 1
