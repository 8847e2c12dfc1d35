"""`sage score` with NLI and judge edges and semantic entropy, on answers and RoTs: every new
column, edges.csv, CIs in the summary, and values equal to independent computations."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from fixtures_cli import assert_clean_error, run_sage
from fixtures_nli import LABEL_ORDERS, make_tiny_nli

from sage.metrics.semantic_entropy import (
    cluster_ids,
    discrete_semantic_entropy,
    equivalence_matrix,
    weighted_semantic_entropy,
)
from sage.metrics.sge import distances_from_similarity, sge_from_distances


def _table():
    rows = []
    data = {
        "q1": ("Is it wrong to lie to a friend?",
               ["Yes, lying to a friend is wrong.", "No, small lies are fine.", "Lying breaks trust, so it is wrong."]),
        "q2": ("Should you return a lost wallet?",
               ["Yes, return it to the owner.", "Yes, return it to the owner.", "Keep it; finders keepers."]),
    }
    for qid, (question, answers) in data.items():
        for k, a in enumerate(answers):
            rows.append({"question_id": qid, "question": question, "paraphrase_id": k, "paraphrase": question,
                         "model": "m", "sample": 0, "answer": a, "rot": f"It is right to act as follows: {a}",
                         "answer_logprob": -3.0 - k, "answer_tokens": 2 + k})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def nli_model(tmp_path_factory):
    return make_tiny_nli(tmp_path_factory.mktemp("nli") / "tiny", LABEL_ORDERS["mnli"])


def _pipeline(nli_model):
    from transformers import pipeline

    return pipeline("text-classification", model=str(nli_model), top_k=None, device="cpu")


def test_nli_sge_and_semantic_entropy_equal_independent_computation(nli_model):
    from sage.metrics.similarity import SimilarityOptions
    from sage.scoring import score_responses

    df = _table()
    res = score_responses(df, metrics=("sge", "se", "cosine"), sge_edges=("cosine", "nli"),
                          similarity=SimilarityOptions(nli_model=str(nli_model)), progress=False, n_boot=200)
    q = res.questions.set_index("question_id")
    for col in ("answer", "rot"):
        for name in ("sge", "sge_nli", "se", "n_clusters", "meansim_nli", "cosine"):
            assert f"{name}_{col}" in q.columns
    clf = _pipeline(nli_model)
    codes = {"ENTAILMENT": 0, "NEUTRAL": 1, "CONTRADICTION": 2}
    for qid, g in df.groupby("question_id"):
        question = g["question"].iloc[0]
        for col in ("answer", "rot"):
            texts = g[col].tolist()
            n = len(texts)
            pe, labels = np.eye(n), np.zeros((n, n), dtype=int)
            for i in range(n):
                for j in range(n):
                    if texts[i] != texts[j]:  # the references' inputs: question, then the answer
                        p = {d["label"]: d["score"] for d in clf({"text": f"{question} {texts[i]}",
                                                                  "text_pair": f"{question} {texts[j]}"})}
                        pe[i, j] = p["ENTAILMENT"]
                        labels[i, j] = codes[max(p, key=p.get)]
            sge = sge_from_distances(distances_from_similarity((pe + pe.T) / 2, texts)).sge
            assert q.loc[qid, f"sge_nli_{col}"] == pytest.approx(sge, abs=1e-6)
            ids = cluster_ids(equivalence_matrix(labels, "loose"))
            assert q.loc[qid, f"se_{col}"] == pytest.approx(discrete_semantic_entropy(ids), abs=1e-12)
            assert q.loc[qid, f"n_clusters_{col}"] == ids.max() + 1
            ll = (g["answer_logprob"] / g["answer_tokens"]).to_numpy() if col == "answer" else None
            if ll is not None:
                assert q.loc[qid, "se_weighted_answer"] == pytest.approx(weighted_semantic_entropy(ids, ll), abs=1e-12)
    # weighted SE only where the table has sequence log-probs (answer_logprob), never invented for RoTs
    assert "se_weighted_answer" in q.columns and "se_weighted_rot" not in q.columns
    # q2 has two identical answers: they are one cluster, so at most two clusters
    assert q.loc["q2", "n_clusters_answer"] <= 2
    m = res.summary["models"]["m"]["metrics"]
    assert {"se_answer", "n_clusters_rot", "sge_nli_answer"} <= set(m)
    assert m["se_answer"]["ci_low"] <= m["se_answer"]["mean"] <= m["se_answer"]["ci_high"]
    assert res.summary["similarities"]["nli"]["labels"]["entailment"] == 2
    # edges.csv: one row per pair and kind, ids equal to the annotation export's
    from sage.annotation.pairs import build_pairs

    e = res.edges
    assert len(e) == 2 * 2 * 3
    pairs = build_pairs(df, ("answer", "rot")).pairs
    assert set(e["pair_id"]) == set(pairs["pair_id"])
    row = e[(e.question_id == "q1") & (e.kind == "answer") & (e.key_a == "p0.s0") & (e.key_b == "p1.s0")].iloc[0]
    q1 = df.loc[df.question_id == "q1", "question"].iloc[0]
    p01 = {d["label"]: d["score"] for d in clf({"text": f"{q1} {row.text_a}", "text_pair": f"{q1} {row.text_b}"})}
    assert row["nli_p_entailment_ab"] == pytest.approx(p01["ENTAILMENT"], abs=1e-6)
    assert row["nli"] == pytest.approx((row["nli_p_entailment_ab"] + row["nli_p_entailment_ba"]) / 2)
    assert 0 <= row["cosine"] <= 1


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_cli_cosine_nli_judge_writes_every_new_column(nli_model, tmp_path):
    df = _table()
    src = tmp_path / "responses.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "run"
    proc = run_sage("score", "--responses", src, "--sge-edges", "cosine,nli,judge", "--metrics", "sge,se,cosine,num_sets,kle",
                    "--nli-model", nli_model, "--judge-model", "smollm2-135m", "--judge-backend", "transformers",
                    "--judge-cache", tmp_path / "judge.sqlite", "--n-boot", "100", "--no-progress", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    q = pd.read_csv(out / "questions.csv")
    for col in ("answer", "rot"):
        for name in ("sge", "sge_nli", "sge_judge", "D_judge", "meansim_judge", "se", "n_clusters", "se_judge",
                     "n_clusters_judge"):
            assert f"{name}_{col}" in q.columns, (name, col)
        assert q[f"sge_judge_{col}"].notna().all() and q[f"se_judge_{col}"].between(0, math.log(3) + 1e-9).all()
    assert q["se_weighted_answer"].notna().all() and "se_weighted_judge_answer" in q.columns
    e = pd.read_csv(out / "edges.csv")
    assert {"cosine", "nli", "judge", "judge_p_yes_ab", "judge_p_yes_ba", "judge_equivalent",
            "nli_p_contradiction_ab"} <= set(e.columns)
    assert e["judge_p_yes_ab"].between(0, 1).all()
    # the graph measures on the judge's edges: NumSets joins answers the judge calls the same both ways
    from sage.metrics.graph_measures import num_sets

    for (qid, kind), g in e.groupby(["question_id", "kind"]):
        keys = sorted(set(g.key_a) | set(g.key_b))
        pos = {k: i for i, k in enumerate(keys)}
        agree = np.eye(len(keys), dtype=bool)
        for r in g.itertuples():
            agree[pos[r.key_a], pos[r.key_b]] = agree[pos[r.key_b], pos[r.key_a]] = (
                r.judge_p_yes_ab > 0.5 and r.judge_p_yes_ba > 0.5)
        assert q.set_index("question_id").loc[qid, f"num_sets_judge_{kind}"] == num_sets(agree)
        assert q.set_index("question_id").loc[qid, f"kle_judge_{kind}"] >= 0
    np.testing.assert_allclose(e["judge"], (e["judge_p_yes_ab"] + e["judge_p_yes_ba"]) / 2, atol=1e-12)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["similarities"]["judge"]["greedy_fallbacks"] == 0 and summary["warnings"] == []
    assert summary["similarities"]["judge"]["ordered_pairs_judged"] == 2 * (6 + 2)  # q2 has two identical answers
    md = (out / "summary.md").read_text()
    assert "SE (answer)" in md and "SGE/judge (rot)" in md and "SE/judge (rot)" in md
    # a rerun is served from the generation cache
    again = run_sage("score", "--responses", src, "--sge-edges", "judge", "--metrics", "sge,se",
                     "--judge-model", "smollm2-135m", "--judge-backend", "transformers",
                     "--judge-cache", tmp_path / "judge.sqlite", "--n-boot", "10", "--no-progress",
                     "--out", tmp_path / "run2")
    assert again.returncode == 0, again.stderr[-2000:]
    q2 = pd.read_csv(tmp_path / "run2" / "questions.csv")
    np.testing.assert_allclose(q2["sge_answer"], q["sge_judge_answer"], atol=1e-12)


def test_se_without_an_equivalence_edge_and_missing_models_are_one_line_errors(tmp_path):
    src = tmp_path / "r.csv"
    _table().to_csv(src, index=False)
    assert_clean_error(run_sage("score", "--responses", src, "--metrics", "se", "--sge-edges", "cosine",
                                "--out", tmp_path / "o"), "add nli or judge to --sge-edges")
    assert_clean_error(run_sage("score", "--responses", src, "--metrics", "sge", "--sge-edges", "nli",
                                "--out", tmp_path / "o"), "needs --nli-model")
    assert_clean_error(run_sage("score", "--responses", src, "--metrics", "sge", "--sge-edges", "judge",
                                "--out", tmp_path / "o"), "needs --judge-model")


def test_se_rules_question_option_and_sampled_logprobs_through_score_responses(nli_model):
    """--se-equivalence, --se-clustering and --no-nli-question reach the clusters; weighted SE uses
    answer_logprob_sampled (the distribution sampled from) over answer_logprob when both exist."""
    from sage.metrics.nli import NLISimilarity
    from sage.metrics.similarity import SimilarityOptions
    from sage.scoring import score_responses

    df = _table()
    df["answer_logprob_sampled"] = [-1.0, -2.5, -0.5, -4.0, -1.0, -2.0]
    base = dict(metrics=("se",), sge_edges=("nli",), on=("answer",), progress=False, n_boot=50)
    for question in (True, False):
        sim = NLISimilarity(str(nli_model), question=question)
        for equivalence in ("loose", "strict"):
            for clustering in ("reference", "first-member", "chain"):
                res = score_responses(df, se_equivalence=equivalence, se_clustering=clustering,
                                      similarity=SimilarityOptions(nli_model=str(nli_model), nli_question=question),
                                      **base)
                q = res.questions.set_index("question_id")
                assert res.summary["config"]["se_equivalence"] == equivalence
                assert res.summary["similarities"]["nli"]["question_conditioning"] is question
                for qid, g in df.groupby("question_id"):
                    labels = sim.relations([g["answer"].tolist()], [g["question"].iloc[0]])[0].labels
                    ids = cluster_ids(equivalence_matrix(labels, equivalence), clustering)
                    assert q.loc[qid, "se_answer"] == pytest.approx(discrete_semantic_entropy(ids), abs=1e-12)
                    ll = (g["answer_logprob_sampled"] / g["answer_tokens"]).to_numpy()
                    assert q.loc[qid, "se_weighted_answer"] == pytest.approx(weighted_semantic_entropy(ids, ll),
                                                                           abs=1e-12)
                # edges.csv marks equivalence under the run's rule
                e = res.edges.set_index(["question_id", "key_a", "key_b"])
                lab = sim.relations([df.loc[df.question_id == "q1", "answer"].tolist()],
                                    [df.loc[df.question_id == "q1", "question"].iloc[0]])[0].labels
                assert e.loc[("q1", "p0.s0", "p1.s0"), "nli_equivalent"] == equivalence_matrix(lab, equivalence)[0, 1]
    from sage.errors import SageInputError

    with pytest.raises(SageInputError, match="se-equivalence"):
        score_responses(df, se_equivalence="kuhn", similarity=SimilarityOptions(nli_model=str(nli_model)), **base)
