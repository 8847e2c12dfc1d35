"""Semantic entropy against hand-worked clusterings: the reference's `get_semantic_ids` rule
(jlko/semantic_uncertainty), Kuhn et al.'s Algorithm 1 and sage's earlier chaining rule on
non-transitive judgments, and the loose / strict equivalence rules."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sage.metrics.semantic_entropy import (
    CONTRADICTION,
    ENTAILMENT,
    NEUTRAL,
    cluster_ids,
    discrete_semantic_entropy,
    equivalence_matrix,
    weighted_semantic_entropy,
)

RULES = ("reference", "first-member", "chain")
H_2_1 = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))  # 0.6365141682948128


def _blocks(*sizes):
    """Equivalence matrix of consecutive blocks of the given sizes."""
    ids = np.repeat(np.arange(len(sizes)), sizes)
    return ids[:, None] == ids[None, :]


def _eq(n, pairs):
    eq = np.eye(n, dtype=bool)
    for i, j in pairs:
        eq[i, j] = eq[j, i] = True
    return eq


@pytest.mark.parametrize("rule", RULES)
def test_one_cluster_is_zero(rule):
    ids = cluster_ids(_blocks(5), rule)
    assert ids.tolist() == [0] * 5 and discrete_semantic_entropy(ids) == 0.0


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_singletons_give_ln_n(n, rule):
    ids = cluster_ids(np.eye(n, dtype=bool), rule)
    assert ids.tolist() == list(range(n))
    assert discrete_semantic_entropy(ids) == pytest.approx(math.log(n), abs=1e-15)


def test_three_two_split_exact_value():
    eq = _blocks(3, 2)
    ids = cluster_ids(eq)
    assert ids.tolist() == [0, 0, 0, 1, 1]
    # -(3/5 ln 3/5 + 2/5 ln 2/5) = 0.6730116670092565
    assert discrete_semantic_entropy(ids) == pytest.approx(0.6730116670092565, abs=1e-15)
    perm = [3, 0, 4, 1, 2]  # interleaved nodes: the same clusters, whatever the order
    assert discrete_semantic_entropy(cluster_ids(eq[np.ix_(perm, perm)])) == pytest.approx(0.6730116670092565)


def test_only_bidirectional_equivalence_joins_a_cluster():
    eq = np.eye(3, dtype=bool)
    eq[0, 1] = True  # one direction only
    assert cluster_ids(eq).tolist() == [0, 1, 2]
    eq[1, 0] = True
    assert cluster_ids(eq).tolist() == [0, 0, 1]


def test_chain_of_non_transitive_judgments():
    # A~B, B~C, A!~C. The reference: A starts a cluster and takes B; C is not equivalent to A, so
    # it starts its own: {A, B}, {C}, SE = 0.637. sage's earlier rule chained C to B: SE 0.
    eq = _eq(3, [(0, 1), (1, 2)])
    assert cluster_ids(eq, "reference").tolist() == [0, 0, 1]
    assert discrete_semantic_entropy(cluster_ids(eq, "reference")) == pytest.approx(H_2_1, abs=1e-15)
    assert round(H_2_1, 3) == 0.637
    assert cluster_ids(eq, "first-member").tolist() == [0, 0, 1]
    assert cluster_ids(eq, "chain").tolist() == [0, 0, 0]
    assert discrete_semantic_entropy(cluster_ids(eq, "chain")) == 0.0


def test_reference_moves_a_node_to_the_last_equivalent_representative():
    # A~C, B~C, A!~B: A and B start clusters; get_semantic_ids puts C with A, then moves it to B
    # (it assigns every later equivalent node, even one already placed). Kuhn et al.'s Algorithm 1
    # keeps C with A, the first cluster whose first member it matches; the chain rule too.
    eq = _eq(3, [(0, 2), (1, 2)])
    assert cluster_ids(eq, "reference").tolist() == [0, 1, 1]
    assert cluster_ids(eq, "first-member").tolist() == [0, 1, 0]
    assert cluster_ids(eq, "chain").tolist() == [0, 1, 0]
    # The same split sizes, so the same discrete SE; the likelihood-weighted SE tells them apart:
    ll = np.log([0.5, 0.3, 0.2])
    ref = -(0.5 * math.log(0.5) + 0.5 * math.log(0.5))  # {A}: 0.5, {B, C}: 0.5
    first = -(0.7 * math.log(0.7) + 0.3 * math.log(0.3))  # {A, C}: 0.7, {B}: 0.3
    assert weighted_semantic_entropy(cluster_ids(eq, "reference"), ll) == pytest.approx(ref, abs=1e-12)
    assert weighted_semantic_entropy(cluster_ids(eq, "first-member"), ll) == pytest.approx(first, abs=1e-12)


def test_five_nodes_where_the_reference_and_algorithm_1_differ_in_entropy():
    # 0 and 1 are not equivalent (two representatives); 2 ~ 0 only; 3 and 4 ~ both 0 and 1; 3~4.
    eq = _eq(5, [(0, 2), (0, 3), (0, 4), (1, 3), (1, 4), (3, 4), (2, 3)])
    # reference: 0 takes 2, 3, 4; then 1 takes 3 and 4 back: {0, 2}, {1, 3, 4}
    assert cluster_ids(eq, "reference").tolist() == [0, 1, 0, 1, 1]
    assert discrete_semantic_entropy(cluster_ids(eq, "reference")) == pytest.approx(
        -(0.4 * math.log(0.4) + 0.6 * math.log(0.6)), abs=1e-15)
    # Kuhn et al.'s Algorithm 1: 3 and 4 match cluster 0's first member: {0, 2, 3, 4}, {1}
    assert cluster_ids(eq, "first-member").tolist() == [0, 1, 0, 0, 0]
    assert discrete_semantic_entropy(cluster_ids(eq, "first-member")) == pytest.approx(
        -(0.8 * math.log(0.8) + 0.2 * math.log(0.2)), abs=1e-15)
    # a path 0~1~2~3: chain puts it in one cluster; the reference in two, {0, 1}, {2, 3}
    assert cluster_ids(_eq(4, [(0, 1), (1, 2), (2, 3)]), "chain").tolist() == [0, 0, 0, 0]
    assert cluster_ids(_eq(4, [(0, 1), (1, 2), (2, 3)]), "reference").tolist() == [0, 0, 1, 1]


def _get_semantic_ids_loop(eq: np.ndarray) -> list[int]:
    """The reference's loop, written out from its description: each unassigned node starts a
    cluster and claims every later node equivalent to it."""
    n = len(eq)
    ids = [-1] * n
    nxt = 0
    for i in range(n):
        if ids[i] == -1:
            ids[i] = nxt
            for j in range(i + 1, n):
                if eq[i][j] and eq[j][i]:
                    ids[j] = nxt
            nxt += 1
    return ids


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 9).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.booleans(), min_size=n * n,
                                                                          max_size=n * n))))
def test_reference_rule_equals_the_loop_on_any_judgments(case):
    n, bits = case
    eq = np.array(bits, dtype=bool).reshape(n, n)
    eq = eq | eq.T
    np.fill_diagonal(eq, True)
    assert cluster_ids(eq, "reference").tolist() == _get_semantic_ids_loop(eq.tolist())
    # every rule has the same representatives, so the same number of clusters
    counts = {rule: int(cluster_ids(eq, rule).max()) + 1 for rule in ("reference", "first-member")}
    assert counts["reference"] == counts["first-member"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5))
def test_transitive_judgments_give_the_same_clusters_under_every_rule(sizes):
    for rule in RULES:
        ids = cluster_ids(_blocks(*sizes), rule)
        assert ids.tolist() == np.repeat(np.arange(len(sizes)), sizes).tolist()
    p = np.array(sizes) / sum(sizes)
    assert discrete_semantic_entropy(ids) == pytest.approx(float(-(p * np.log(p)).sum()), abs=1e-12)


@pytest.mark.parametrize("fwd,bwd,strict,loose", [
    (ENTAILMENT, ENTAILMENT, True, True),
    (ENTAILMENT, NEUTRAL, False, True),   # loose: no contradiction and not both neutral
    (NEUTRAL, ENTAILMENT, False, True),
    (NEUTRAL, NEUTRAL, False, False),
    (ENTAILMENT, CONTRADICTION, False, False),
    (NEUTRAL, CONTRADICTION, False, False),
    (CONTRADICTION, CONTRADICTION, False, False),
])
def test_equivalence_rules_of_get_semantic_ids(fwd, bwd, strict, loose):
    labels = np.array([[ENTAILMENT, fwd], [bwd, ENTAILMENT]])
    assert equivalence_matrix(labels, "strict")[0, 1] == equivalence_matrix(labels, "strict")[1, 0] == strict
    assert equivalence_matrix(labels, "loose")[0, 1] == loose
    assert equivalence_matrix(labels, "loose").diagonal().all()


def test_loose_and_strict_give_different_entropy_on_one_group():
    # 0 entails 1, 1 is neutral to 0: one cluster under loose (SE 0), two under strict (ln 2).
    labels = np.array([[ENTAILMENT, ENTAILMENT], [NEUTRAL, ENTAILMENT]])
    assert discrete_semantic_entropy(cluster_ids(equivalence_matrix(labels, "loose"))) == 0.0
    assert discrete_semantic_entropy(cluster_ids(equivalence_matrix(labels, "strict"))) == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="loose, strict"):
        equivalence_matrix(labels, "kuhn")
    with pytest.raises(ValueError, match="reference"):
        cluster_ids(np.eye(2, dtype=bool), "greedy")


def test_weighted_semantic_entropy_hand_worked():
    ids = np.array([0, 0, 1])
    ll = np.log([0.5, 0.25, 0.25])
    expected = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert weighted_semantic_entropy(ids, ll) == pytest.approx(expected, abs=1e-12)
    assert weighted_semantic_entropy(ids, ll - 40.0) == pytest.approx(expected, abs=1e-12)  # normalised over samples
    assert weighted_semantic_entropy(ids, np.zeros(3)) == pytest.approx(discrete_semantic_entropy(ids))
    assert math.isnan(weighted_semantic_entropy(ids, np.array([0.0, np.nan, 0.0])))
