"""SGE against hand-worked graphs, an independent loop-based reference, and properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sage.metrics.sge import (
    build_graph,
    cosine_distances,
    distances_from_similarity,
    sge_from_distances,
    sge_from_graph,
)


def reference_sge(dist):
    """Straight from the definition, with Python loops and math only."""
    n = len(dist)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    D = sum(dist[i][j] for i, j in pairs) / len(pairs)
    f = [sum(dist[i][u] for u in range(n) if u != i) for i in range(n)]
    total = sum(f)
    # 0 log 0 = 0; test p, not f: a subnormal f_i can still divide to p_i == 0.
    p = [fi / total for fi in f]
    H = -sum(pi * math.log(pi) for pi in p if pi > 0)
    return 1 - D * H, D, H


def test_two_nodes_hand_worked():
    r = sge_from_distances(np.array([[0, 0.5], [0.5, 0]]))
    # D = 0.5, p = (1/2, 1/2), H = ln 2
    assert r.D == pytest.approx(0.5)
    assert r.H == pytest.approx(math.log(2))
    assert r.sge == pytest.approx(1 - 0.5 * math.log(2))
    assert r.n == 2 and r.defined


def test_three_nodes_hand_worked():
    d = np.array([[0, 0.2, 0.4], [0.2, 0, 0.6], [0.4, 0.6, 0]])
    r = sge_from_distances(d)
    # ordered-pair sum 2.4 over 6 pairs; f = (0.6, 0.8, 1.0); p = (1/4, 1/3, 5/12)
    H = 0.25 * math.log(4) + (1 / 3) * math.log(3) + (5 / 12) * math.log(12 / 5)
    assert r.D == pytest.approx(0.4)
    assert r.H == pytest.approx(H)
    assert r.sge == pytest.approx(1 - 0.4 * H)
    assert r.mean_similarity == pytest.approx(0.6)


def test_five_nodes_one_outlier_hand_worked():
    d = np.zeros((5, 5))
    d[0, 1:] = d[1:, 0] = 1.0  # node 0 far from four identical answers
    r = sge_from_distances(d)
    # D = 8/20; f = (4, 1, 1, 1, 1); p = (1/2, 1/8 x 4); H = 2 ln 2
    assert r.D == pytest.approx(0.4)
    assert r.H == pytest.approx(2 * math.log(2))
    assert r.sge == pytest.approx(1 - 0.8 * math.log(2))


def test_single_node_is_undefined():
    r = sge_from_distances(np.zeros((1, 1)))
    assert not r.defined and math.isnan(r.sge)


def test_identical_answers_give_one():
    r = sge_from_distances(np.zeros((4, 4)))
    assert r.sge == 1.0 and r.D == 0.0
    assert r.H == pytest.approx(math.log(4))  # documented: uniform limit


def test_identical_texts_are_separate_nodes_at_distance_zero():
    emb = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    d = cosine_distances(emb)
    assert d[0, 1] == 0.0 and d[0, 2] == pytest.approx(1.0)
    r = sge_from_distances(d)
    ref = reference_sge(d.tolist())
    assert r.n == 3 and r.sge == pytest.approx(ref[0])


def test_networkx_graph_gives_same_value():
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(6, 8))
    d = cosine_distances(emb)
    g = build_graph([f"t{i}" for i in range(6)], d)
    assert g.number_of_nodes() == 6 and g.number_of_edges() == 15
    assert sge_from_graph(g).sge == pytest.approx(sge_from_distances(d).sge, abs=1e-12)


def test_asymmetric_similarity_is_symmetrised():
    s = np.array([[1.0, 0.2], [0.6, 1.0]])
    d = distances_from_similarity(s)
    assert d[0, 1] == d[1, 0] == pytest.approx(0.6)


def _sym_dist(n_max=7):
    return st.integers(2, n_max).flatmap(
        lambda n: arrays(np.float64, (n, n), elements=st.floats(0, 2, allow_nan=False))
    ).map(lambda a: np.triu(a, 1) + np.triu(a, 1).T)


@settings(max_examples=150, deadline=None)
@given(_sym_dist())
def test_matches_reference(d):
    r = sge_from_distances(d)
    if d.sum() == 0:
        assert r.sge == 1.0
        return
    sge, D, H = reference_sge(d.tolist())
    assert r.sge == pytest.approx(sge, abs=1e-9)
    assert r.D == pytest.approx(D, abs=1e-12)
    assert r.H == pytest.approx(H, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(_sym_dist(), st.randoms(use_true_random=False))
def test_node_order_invariance(d, rnd):
    perm = list(range(len(d)))
    rnd.shuffle(perm)
    p = np.array(perm)
    assert sge_from_distances(d[np.ix_(p, p)]).sge == pytest.approx(sge_from_distances(d).sge, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 8).flatmap(lambda n: arrays(np.float64, (n, 5), elements=st.floats(-1, 1, allow_nan=False))))
def test_cosine_bounds(emb):
    n = len(emb)
    r = sge_from_distances(cosine_distances(emb))
    # |sum of unit vectors|^2 >= 0 bounds the mean pairwise cosine below by -1/(n-1): D <= n/(n-1)
    assert 0.0 <= r.D <= n / (n - 1) + 1e-9
    assert 0.0 <= r.H <= math.log(n) + 1e-12
    assert 1.0 - n * math.log(n) / (n - 1) - 1e-9 <= r.sge <= 1.0 + 1e-12


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_a_regular_simplex_reaches_the_cosine_lower_bound(n):
    # the centred standard basis: every pair at cosine -1/(n-1), every node the same total distance
    emb = np.eye(n) - 1.0 / n
    r = sge_from_distances(cosine_distances(emb))
    assert r.D == pytest.approx(n / (n - 1), abs=1e-12)
    assert r.H == pytest.approx(math.log(n), abs=1e-12)
    assert r.sge == pytest.approx(1.0 - n * math.log(n) / (n - 1), abs=1e-12)
    if n == 5:
        assert round(r.sge, 3) == -1.012
