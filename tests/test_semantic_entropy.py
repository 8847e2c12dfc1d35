"""Semantic entropy against hand-worked clusterings, and the greedy bidirectional clustering."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sage.metrics.semantic_entropy import (
    cluster_ids,
    discrete_semantic_entropy,
    weighted_semantic_entropy,
)


def _blocks(*sizes):
    """Equivalence matrix of consecutive blocks of the given sizes."""
    ids = np.repeat(np.arange(len(sizes)), sizes)
    return ids[:, None] == ids[None, :]


def test_one_cluster_is_zero():
    ids = cluster_ids(_blocks(5))
    assert ids.tolist() == [0] * 5 and discrete_semantic_entropy(ids) == 0.0


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_singletons_give_ln_n(n):
    ids = cluster_ids(np.eye(n, dtype=bool))
    assert ids.tolist() == list(range(n))
    assert discrete_semantic_entropy(ids) == pytest.approx(math.log(n), abs=1e-15)


def test_three_two_split_exact_value():
    eq = _blocks(3, 2)
    ids = cluster_ids(eq)
    assert ids.tolist() == [0, 0, 0, 1, 1]
    # -(3/5 ln 3/5 + 2/5 ln 2/5) = 0.6730116670092565
    assert discrete_semantic_entropy(ids) == pytest.approx(0.6730116670092565, abs=1e-15)
    # interleaved nodes: the same clusters, whatever the order
    perm = [3, 0, 4, 1, 2]
    assert discrete_semantic_entropy(cluster_ids(eq[np.ix_(perm, perm)])) == pytest.approx(0.6730116670092565)


def test_only_bidirectional_entailment_joins_a_cluster():
    entails = np.eye(3, dtype=bool)
    entails[0, 1] = True  # 0 entails 1, 1 does not entail 0
    assert cluster_ids(entails & entails.T).tolist() == [0, 1, 2]
    assert cluster_ids(entails).tolist() == [0, 1, 2]  # one direction is not enough even if passed
    entails[1, 0] = True
    assert cluster_ids(entails).tolist() == [0, 0, 1]


def test_greedy_rule_joins_the_first_equivalent_earlier_node():
    # 0~1 and 1~2 but not 0~2 (equivalence judged by a model need not be transitive):
    # node 2 joins node 1's cluster, the first earlier node it is equivalent with.
    eq = np.eye(3, dtype=bool)
    eq[0, 1] = eq[1, 0] = eq[1, 2] = eq[2, 1] = True
    assert cluster_ids(eq).tolist() == [0, 0, 0]
    eq2 = np.eye(3, dtype=bool)
    eq2[1, 2] = eq2[2, 1] = True
    assert cluster_ids(eq2).tolist() == [0, 1, 1]


def test_weighted_semantic_entropy_hand_worked():
    ids = np.array([0, 0, 1])
    ll = np.log([0.5, 0.25, 0.25])
    expected = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert weighted_semantic_entropy(ids, ll) == pytest.approx(expected, abs=1e-12)
    assert weighted_semantic_entropy(ids, ll - 40.0) == pytest.approx(expected, abs=1e-12)  # normalised over samples
    assert weighted_semantic_entropy(ids, np.zeros(3)) == pytest.approx(discrete_semantic_entropy(ids))
    assert math.isnan(weighted_semantic_entropy(ids, np.array([0.0, np.nan, 0.0])))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5))
def test_discrete_entropy_equals_formula_for_any_block_sizes(sizes):
    ids = cluster_ids(_blocks(*sizes))
    assert ids.max() + 1 == len(sizes)
    p = np.array(sizes) / sum(sizes)
    assert discrete_semantic_entropy(ids) == pytest.approx(float(-(p * np.log(p)).sum()), abs=1e-12)
    assert 0.0 <= discrete_semantic_entropy(ids) <= math.log(sum(sizes)) + 1e-12
