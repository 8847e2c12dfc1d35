"""Graph measures (NumSets, EigV, Degree, Eccentricity, KLE) against values worked out by hand on
a complete graph, two disjoint cliques and a star, and against independent scipy / networkx
computations; then through `score_responses` on every edge similarity.

LM-Polygraph's own estimators are compared on the same matrices in
tests/test_metrics_graph_measures_polygraph.py."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from sage.errors import SageInputError
from sage.metrics import graph_measures as gm


def complete(n):
    return np.ones((n, n))


def cliques(a, b):
    w = np.zeros((a + b, a + b))
    w[:a, :a] = 1.0
    w[a:, a:] = 1.0
    return w


def star(n):
    """Node 0 joined to every leaf with weight 1; leaves not joined to each other."""
    w = np.zeros((n, n))
    w[0, :] = w[:, 0] = 1.0
    np.fill_diagonal(w, 1.0)
    return w


def vne(mu):
    mu = np.asarray(mu, float)
    return float(-(mu * np.log(mu)).sum())


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_complete_graph(n):
    w = complete(n)
    # L = I - J/n: eigenvalues 0 (once) and 1: EigV = 1; D = n, so Degree = 0; the only eigenvector
    # kept (eigenvalue 0 < 0.9) is constant, so every node sits at the mean: Ecc = 0.
    assert gm.eigv(w) == pytest.approx(1.0, abs=1e-12)
    assert gm.degree(w) == 0.0
    assert gm.eccentricity(w) == pytest.approx(0.0, abs=1e-7)
    assert gm.num_sets(w > 0.5) == 1
    # KLE: adjacency 2(J - I), L_G = 2(nI - J); expm(-t L_G) = J/n + e^{-2tn}(I - J/n), diagonal
    # d = 1/n + e^{-2tn}(1 - 1/n); the unit-trace kernel has eigenvalues 1/(nd) and e^{-2tn}/(nd) (n - 1 times).
    t = 0.3
    e = math.exp(-2 * t * n)
    d = 1 / n + e * (1 - 1 / n)
    expected = vne([1 / (n * d)] + [e / (n * d)] * (n - 1))
    assert gm.kle(w) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("a,b", [(1, 1), (2, 3), (4, 4), (1, 5)])
def test_two_disjoint_cliques(a, b):
    w = cliques(a, b)
    n = a + b
    # Two components: eigenvalue 0 twice, 1 otherwise: EigV = 2.
    assert gm.eigv(w) == pytest.approx(2.0, abs=1e-12)
    # D = a on clique A, b on clique B: trace(nI - D) = a(n - a) + b(n - b) = 2ab.
    assert gm.degree(w) == pytest.approx(2 * a * b / n**2, abs=1e-15)
    # Kept eigenvectors: the cliques' indicators 1_A/sqrt(a), 1_B/sqrt(b). Centred, node of A:
    # (1/sqrt(a) - sqrt(a)/n, -sqrt(b)/n); summed squares over A: b/n, over B: a/n; Ecc = 1.
    assert gm.eccentricity(w) == pytest.approx(1.0, abs=1e-12)
    assert gm.num_sets(w > 0.5) == 2
    # KLE: block diagonal, each block a complete graph of its own size (above), over n.
    t = 0.3
    mu = []
    for k in (a, b):
        e = math.exp(-2 * t * k)
        d = 1 / k + e * (1 - 1 / k)
        mu += [1 / (n * d)] + [e / (n * d)] * (k - 1)
    assert gm.kle(w) == pytest.approx(vne(mu), abs=1e-12)


@pytest.mark.parametrize("n", [3, 5, 8])
def test_star(n):
    w = star(n)
    m = n - 1
    # D: n at the centre, 2 at each leaf. Eigenvalues of D^-1/2 W D^-1/2: 1/2 on leaf vectors
    # summing to 0 (n - 2 of them); on span(e_0, 1_leaves/sqrt(m)) the matrix
    # [[1/n, s], [s, 1/2]], s = sqrt(m/(2n)), has eigenvalues 1 and 1/n - 1/2. So L has 0,
    # 1/2 (n - 2 times) and 3/2 - 1/n: EigV = 1 + (n - 2)/2 = n/2.
    lam = np.linalg.eigvalsh(gm.normalized_laplacian(w))
    np.testing.assert_allclose(lam, [0.0] + [0.5] * (n - 2) + [1.5 - 1 / n], atol=1e-12)
    assert gm.eigv(w) == pytest.approx(n / 2, abs=1e-12)
    assert gm.degree(w) == pytest.approx((n - 1) * (n - 2) / n**2, abs=1e-15)  # leaves: n - 2 each
    # Ecc keeps all but the eigenvector w_top of 3/2 - 1/n: Ecc^2 = trace(C) - w_top' C w_top
    # = (n - 1) - 1 + (1' w_top)^2 / n with C the centring projection. In the 2-d basis w_top = (x, y),
    # y = -x/(2s), x^2 = 2m/(2m + n), so 1' w_top = x (1 - sqrt(n/2)).
    x2 = 2 * m / (2 * m + n)
    s1 = x2 * (1 - math.sqrt(n / 2)) ** 2
    assert gm.eccentricity(w) == pytest.approx(math.sqrt(n - 2 + s1 / n), abs=1e-12)
    assert gm.num_sets(w > 0.5) == 1  # every leaf reaches every other through the centre
    # KLE: the official code's path, written here: a networkx graph with the two directions'
    # weights (2 per edge), its Laplacian, scipy's expm, normalisation, eigenvalues.
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_weighted_edges_from((0, j, 2.0) for j in range(1, n))
    for kernel, k in (("heat", scipy.linalg.expm(-0.3 * nx.laplacian_matrix(g).toarray())),
                      ("matern", scipy.linalg.fractional_matrix_power(2 * np.eye(n) + nx.laplacian_matrix(g).toarray(),
                                                                       -1.0))):
        dk = np.sqrt(np.diag(k))
        mu = np.linalg.eigvals(k / np.outer(dk, dk) / n).real
        expected = vne(mu[mu > 1e-8])
        assert gm.kle(w, gm.GraphOptions(kle_kernel=kernel)) == pytest.approx(expected, abs=1e-10), kernel


def test_matern_kernel_equals_scipy_fractional_power_with_other_nu_kappa():
    w = np.array([[1, 0.9, 0.1, 0.0], [0.9, 1, 0.2, 0.1], [0.1, 0.2, 1, 0.7], [0.0, 0.1, 0.7, 1]])
    opts = gm.GraphOptions(kle_kernel="matern", kle_nu=2.0, kle_kappa=3.0)
    a = 2 * w
    np.fill_diagonal(a, 0)
    lap = np.diag(a.sum(0)) - a
    k = scipy.linalg.fractional_matrix_power((2 * 2.0 / 3.0**2) * np.eye(4) + lap, -2.0).real
    np.testing.assert_allclose(gm.kernel_matrix(w, opts), k, atol=1e-12)
    heat = gm.GraphOptions(kle_t=0.7)
    np.testing.assert_allclose(gm.kernel_matrix(w, heat), scipy.linalg.expm(-0.7 * lap), atol=1e-12)


def test_affinity_symmetrises_clips_and_joins_identical_texts():
    s = np.array([[1.0, 0.2, -0.3], [0.6, 1.0, 0.5], [-0.3, 0.5, 1.0]])
    w = gm.affinity(s, ["a", "b", "a"])
    np.testing.assert_allclose(w, [[1, 0.4, 1], [0.4, 1, 0.5], [1, 0.5, 1]])
    assert gm.affinity(s)[0, 2] == 0.0  # a negative cosine counts as no edge


_sym = st.integers(2, 9).flatmap(lambda n: st.lists(st.floats(0, 1), min_size=n * n, max_size=n * n))


@settings(max_examples=100, deadline=None)
@given(_sym)
def test_ranges_on_any_graph(vals):
    n = int(round(math.sqrt(len(vals))))
    w = gm.affinity(np.array(vals).reshape(n, n))
    assert 1 - 1e-9 <= gm.eigv(w) <= n + 1e-9
    assert -1e-12 <= gm.degree(w) <= (n - 1) / n + 1e-12
    assert -1e-9 <= gm.eccentricity(w) <= math.sqrt(n - 1) + 1e-9
    assert -1e-9 <= gm.kle(w) <= math.log(n) + 1e-9
    assert 1 <= gm.num_sets(w > 0.5) <= n
    # heat-kernel KLE equals the expm route (the references use scipy.linalg.expm)
    a = 2 * w
    np.fill_diagonal(a, 0)
    k = scipy.linalg.expm(-0.3 * (np.diag(a.sum(0)) - a))
    assert gm.kle(w) == pytest.approx(gm.von_neumann_entropy(k), abs=1e-9)


def test_options_are_validated():
    with pytest.raises(SageInputError, match="unknown KLE kernel"):
        gm.GraphOptions(kle_kernel="rbf")
    with pytest.raises(SageInputError, match="kle-t must be > 0"):
        gm.GraphOptions(kle_t=0)
    with pytest.raises(SageInputError, match="eccentricity threshold"):
        gm.GraphOptions(eccentricity_threshold=0)


def test_every_graph_measure_on_every_edge_through_score_responses(quality100):
    """The authors' released pair similarities (stsb cosine, ROUGE-L) as two edges, no SGE asked:
    each measure's column equals the function on the matrix rebuilt from the file, summary CIs,
    options recorded, lexsim is rouge_l computed once."""
    from sage.scoring import score_responses
    from tests.test_data_pair_layout import authors_matrices

    path = quality100 / "q100_gpt_3.5_edges.csv"
    edges = ("column:cosine_model_output", "column:rouge_model_output")
    opts = gm.GraphOptions(kle_kernel="matern", kle_nu=2.0, eccentricity_threshold=0.8)
    res = score_responses(path, metrics=("num_sets", "eigv", "degree", "eccentricity", "kle", "lexsim"),
                          on=("answer",), sge_edges=edges, graph=opts, n_boot=100, progress=False)
    q = res.questions.set_index("question_id")
    assert list(res.summary["config"]["metrics"]) == ["num_sets", "eigv", "degree", "eccentricity", "kle", "rouge_l"]
    assert res.summary["config"]["graph"]["kle_kernel"] == "matern"
    for edge, prefix in ((edges[0], ""), (edges[1], "rouge_model_output_")):
        mats = authors_matrices(path, edge.removeprefix("column:"))
        for qid in list(mats)[:25]:
            texts, s = mats[qid]
            w = gm.affinity(s, texts)
            assert q.loc[qid, f"eigv_{prefix}answer"] == pytest.approx(gm.eigv(w), abs=1e-12)
            assert q.loc[qid, f"degree_{prefix}answer"] == pytest.approx(gm.degree(w), abs=1e-12)
            assert q.loc[qid, f"eccentricity_{prefix}answer"] == pytest.approx(gm.eccentricity(w, 0.8), abs=1e-9)
            assert q.loc[qid, f"kle_{prefix}answer"] == pytest.approx(gm.kle(w, opts), abs=1e-12)
            assert q.loc[qid, f"num_sets_{prefix}answer"] == gm.num_sets(w > 0.5)
    # lexsim = rouge_l: the mean pairwise ROUGE-L, one column, equal to the authors' ROUGE column's mean
    mats = authors_matrices(path, "rouge_model_output")
    assert "lexsim_answer" not in q.columns
    for qid in list(mats)[:10]:
        s = mats[qid][1]
        assert q.loc[qid, "rouge_l_answer"] == pytest.approx(s[np.triu_indices(len(s), 1)].mean(), abs=1e-9)
    m = res.summary["models"]["model"]["metrics"]
    assert m["eigv_answer"]["n"] == 100 and m["eigv_answer"]["ci_low"] <= m["eigv_answer"]["mean"] <= m["eigv_answer"]["ci_high"]
    from sage.scoring import headline_columns

    labels = dict(headline_columns(res.summary))
    assert labels["kle_answer"] == "KLE (answer)" and labels["eigv_rouge_model_output_answer"].startswith("EigV/column:")
