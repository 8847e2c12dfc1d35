"""NLI edges: a tiny random-weight 3-way NLI model built here and scored through `sage` equals the
same model run through `transformers`' text-classification pipeline; the label order comes from
`id2label` (checked with two orders on the same weights)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from fixtures_nli import LABEL_ORDERS, make_tiny_nli

from sage.errors import SageInputError
from sage.metrics.nli import LABELS, NLISimilarity, label_indices

GROUPS = [
    ["Lying to a friend is wrong.", "You should never lie, even to spare feelings.", "A white lie is sometimes fine."],
    ["Return the wallet to its owner.", "Keep the cash; finders keepers.", "Lying to a friend is wrong."],
]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("nli")
    return {name: make_tiny_nli(root / name, order) for name, order in LABEL_ORDERS.items()}


def _pipeline_probs(path, premise, hypothesis):
    from transformers import pipeline

    clf = _pipeline_probs.cache.get(path)
    if clf is None:
        clf = _pipeline_probs.cache[path] = pipeline("text-classification", model=str(path), top_k=None, device="cpu")
    return {d["label"].lower(): d["score"] for d in clf({"text": premise, "text_pair": hypothesis})}


_pipeline_probs.cache = {}


@pytest.mark.parametrize("order", list(LABEL_ORDERS))
def test_probabilities_equal_transformers_pipeline(tiny_models, order):
    sim = NLISimilarity(str(tiny_models[order]), batch_size=4)
    rels = sim.relations(GROUPS)
    for g, rel in zip(GROUPS, rels):
        for i, a in enumerate(g):
            for j, b in enumerate(g):
                if i == j:
                    continue
                ref = _pipeline_probs(tiny_models[order], a, b)
                for lab in LABELS:
                    assert rel.values[f"p_{lab}"][i, j] == pytest.approx(ref[lab], abs=1e-6)
                assert rel.entails[i, j] == (max(ref, key=ref.get) == "entailment")
    # Both directions of every pair, each distinct ordered text pair once (one text occurs in both groups).
    assert sim.n_scored == 12
    expected = {"mnli": {"entailment": 2, "neutral": 1, "contradiction": 0},
                "permuted": {"entailment": 0, "contradiction": 1, "neutral": 2}}[order]
    assert sim.describe()["labels"] == expected


def test_label_order_is_read_from_id2label(tiny_models):
    """Same weights, two label orders: sage's P(entailment) follows the names, not the positions."""
    a = NLISimilarity(str(tiny_models["mnli"])).relations(GROUPS[:1])[0].values
    b = NLISimilarity(str(tiny_models["permuted"])).relations(GROUPS[:1])[0].values
    # mnli names output 2 entailment; permuted names output 0 entailment and output 2 neutral.
    off = ~np.eye(3, dtype=bool)
    np.testing.assert_allclose(b["p_neutral"][off], a["p_entailment"][off], atol=1e-6)
    np.testing.assert_allclose(b["p_entailment"][off], a["p_contradiction"][off], atol=1e-6)
    assert not np.allclose(a["p_entailment"][off], b["p_entailment"][off])


def test_edge_similarities_and_batching(tiny_models):
    path = str(tiny_models["mnli"])
    one = NLISimilarity(path, batch_size=1)
    many = NLISimilarity(path, batch_size=7)
    ent, ent7 = one.matrices(GROUPS), many.matrices(GROUPS)
    rels = one.relations(GROUPS)
    for s, s7, rel in zip(ent, ent7, rels):
        pe, pc = rel.values["p_entailment"], rel.values["p_contradiction"]
        np.testing.assert_allclose(s7, s, atol=1e-6)
        np.testing.assert_allclose(s[~np.eye(3, dtype=bool)], ((pe + pe.T) / 2)[~np.eye(3, dtype=bool)])
        assert np.allclose(np.diag(s), 1.0) and np.allclose(s, s.T)
    nc = NLISimilarity(path, edge="not-contradict").matrices(GROUPS)
    for s, rel in zip(nc, rels):
        pc = rel.values["p_contradiction"]
        off = ~np.eye(3, dtype=bool)
        np.testing.assert_allclose(s[off], (1 - np.maximum(pc, pc.T))[off], atol=1e-6)


def test_identical_texts_entail_each_other_without_a_model_call(tiny_models):
    sim = NLISimilarity(str(tiny_models["mnli"]))
    rel = sim.relations([["same answer", "same answer", "other answer"]])[0]
    assert rel.labels[0, 1] == rel.labels[1, 0] == 0 and rel.values["p_entailment"][0, 1] == 1.0
    assert rel.agrees[0, 1] and rel.agrees[1, 0]
    assert sim.n_scored == 2  # two distinct ordered text pairs: same -> other, other -> same


def test_inputs_are_conditioned_on_the_question_as_the_references_do(tiny_models):
    """Each side is "{question} {answer}" where the group's question is known (Kuhn et al.,
    Farquhar et al.'s --condition_on_question, Lin et al.); the answers alone without one or with
    question=False."""
    path = tiny_models["mnli"]
    questions = ["Is it okay to lie to a friend?", None]
    rels = NLISimilarity(str(path)).relations(GROUPS, questions)
    plain = NLISimilarity(str(path), question=False).relations(GROUPS, questions)
    for g, q, rel, rel_plain in zip(GROUPS, questions, rels, plain):
        for i, a in enumerate(g):
            for j, b in enumerate(g):
                if i == j:
                    continue
                sent = (f"{q} {a}", f"{q} {b}") if q else (a, b)
                ref = _pipeline_probs(path, *sent)
                bare = _pipeline_probs(path, a, b)
                for k, lab in enumerate(LABELS):
                    assert rel.values[f"p_{lab}"][i, j] == pytest.approx(ref[lab], abs=1e-6)
                    assert rel_plain.values[f"p_{lab}"][i, j] == pytest.approx(bare[lab], abs=1e-6)
                assert rel.labels[i, j] == LABELS.index(max(ref, key=ref.get))
                assert rel.agrees[i, j] == (ref["entailment"] > ref["contradiction"])
    # conditioning changes the model's inputs, so the probabilities of the first group differ
    assert not np.allclose(rels[0].values["p_entailment"], plain[0].values["p_entailment"])
    np.testing.assert_allclose(rels[1].values["p_entailment"], plain[1].values["p_entailment"], atol=1e-6)
    d = NLISimilarity(str(path)).describe()
    assert d["question_conditioning"] is True


def test_graded_edge_weights_entailment_one_neutral_half(tiny_models):
    path = str(tiny_models["mnli"])
    rels = NLISimilarity(path).relations(GROUPS)
    for s, rel in zip(NLISimilarity(path, edge="graded").matrices(GROUPS), rels):
        w = rel.values["p_entailment"] + 0.5 * rel.values["p_neutral"]
        off = ~np.eye(3, dtype=bool)
        np.testing.assert_allclose(s[off], ((w + w.T) / 2)[off], atol=1e-12)
        assert np.allclose(np.diag(s), 1.0)


def test_label_indices_and_errors(tmp_path):
    assert label_indices({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}) == {
        "contradiction": 0, "neutral": 1, "entailment": 2}
    assert label_indices({"0": "entails", "1": "contradicts"}) == {"entailment": 0, "contradiction": 1}
    with pytest.raises(SageInputError, match="names no entailment or contradiction output"):
        label_indices({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    from sage.metrics.similarity import SimilarityOptions, build_similarity

    with pytest.raises(SageInputError, match="needs --nli-model"):
        build_similarity("nli", SimilarityOptions())
    with pytest.raises(SageInputError, match="not available locally"):
        build_similarity("nli", SimilarityOptions(nli_model="nobody/no-such-nli-model"))
    with pytest.raises(SageInputError, match="unknown NLI edge"):
        NLISimilarity(str(tmp_path), edge="both")


def test_kle_onehot_edge_weights_the_argmax_label(tiny_models):
    """Issue 58 item 3: the official KLE graph's weights, entailment 1, neutral 0.5, contradiction 0,
    of the argmax label, averaged over both directions."""
    path = str(tiny_models["mnli"])
    rels = NLISimilarity(path).relations(GROUPS)
    for s, rel in zip(NLISimilarity(path, edge="kle-onehot").matrices(GROUPS), rels):
        p = np.stack([rel.values["p_entailment"], rel.values["p_neutral"], rel.values["p_contradiction"]], -1)
        lab = p.argmax(-1)
        w = np.where(lab == 0, 1.0, np.where(lab == 1, 0.5, 0.0))
        off = ~np.eye(3, dtype=bool)
        np.testing.assert_allclose(s[off], ((w + w.T) / 2)[off], atol=0)
        assert set(np.unique(s[off])) <= {0.0, 0.25, 0.5, 0.75, 1.0}


class _FixedNLI:
    """A stand-in NLIClassifier: fixed (P(entailment), P(neutral), P(contradiction)) per ordered pair."""

    TABLE: ClassVar[dict] = {("A", "B"): (0.70, 0.20, 0.10),  # entailment -> 1
             ("B", "A"): (0.30, 0.60, 0.10),  # neutral -> 0.5
             ("A", "C"): (0.10, 0.20, 0.70),  # contradiction -> 0
             ("C", "A"): (0.40, 0.45, 0.15),  # neutral (by 0.05) -> 0.5
             ("B", "C"): (0.20, 0.30, 0.50),  # contradiction -> 0
             ("C", "B"): (0.45, 0.10, 0.45 - 1e-9)}  # entailment (by 1e-9) -> 1

    def __init__(self, model, device=None, batch_size=32, max_length=512):
        from sage.metrics.forward_clock import ForwardClock

        self.path, self.labels, self.max_length, self.clock = model, {}, max_length, ForwardClock()

    def probabilities(self, pairs):
        return np.array([self.TABLE[p] for p in pairs])


def test_kle_onehot_edge_hand_computed(monkeypatch):
    """Issue 58: `--nli-edge kle-onehot` on a hand-worked 3-answer graph. The official KLE
    `get_entailment_graph` (manual weights) gives each pair int(l1 == entailment) + int(l2 ==
    entailment) + 0.5 int(l1 == neutral) + 0.5 int(l2 == neutral) over the argmax labels l1, l2 of
    its two directions; sage's W is half that sum (KLE adds A = 2W back), 1 on the diagonal:
    AB = (1 + 0.5) / 2, AC = (0 + 0.5) / 2, BC = (0 + 1) / 2. The soft `graded` edge differs."""
    from sage.metrics import nli

    monkeypatch.setattr(nli, "NLIClassifier", _FixedNLI)
    group = [["A", "B", "C"]]
    expected = np.array([[1.0, 0.75, 0.25],
                         [0.75, 1.0, 0.5],
                         [0.25, 0.5, 1.0]])
    (s,) = NLISimilarity("fixed", edge="kle-onehot", question=False).matrices(group)
    np.testing.assert_array_equal(s, expected)
    official_sum = {(0, 1): 1 + 0.5, (0, 2): 0 + 0.5, (1, 2): 0 + 1}  # get_entailment_graph's edge weights
    for (i, j), w in official_sum.items():
        assert 2 * s[i, j] == w
    # KLE on it equals the official pipeline on get_entailment_graph's graph: networkx Laplacian,
    # heat kernel expm(-t L), K_ij / sqrt(K_ii K_jj) / n, von Neumann entropy (vn_entropy, scale=False).
    import networkx as nx
    from scipy.linalg import expm

    from sage.metrics import graph_measures as gm

    graph = nx.Graph()
    graph.add_nodes_from(range(3))
    graph.add_weighted_edges_from((i, j, w) for (i, j), w in official_sum.items())
    k = expm(-0.3 * nx.laplacian_matrix(graph).toarray())
    k = k / np.sqrt(np.outer(np.diag(k), np.diag(k))) / 3
    mu = np.linalg.eigvalsh(k)
    assert gm.kle(gm.affinity(s)) == pytest.approx(-sum(m * np.log(m) for m in mu if m > 1e-8), abs=1e-12)
    # graded (LM-Polygraph): mean over directions of P(entail) + 0.5 P(neutral): AB = (0.8 + 0.6) / 2
    (g,) = NLISimilarity("fixed", edge="graded", question=False).matrices(group)
    assert g[0, 1] == pytest.approx(0.7) and g[0, 2] == pytest.approx((0.2 + 0.625) / 2)
    assert g[1, 2] == pytest.approx((0.35 + 0.5) / 2)
