"""Issue 58 items 1 and 5: a NaN or infinite pair value is a clear ValueError in every graph measure
(not numpy's LinAlgError, not a silent NaN), and SGE lies in [1 - ln n, 1]."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sage.metrics import graph_measures as gm
from sage.metrics.sge import distances_from_similarity, sge_from_distances


def _sim_with(bad):
    s = np.full((4, 4), 0.5)
    np.fill_diagonal(s, 1.0)
    s[1, 2] = s[2, 1] = bad
    return s


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("measure", [
    lambda s: sge_from_distances(1.0 - s),
    lambda s: distances_from_similarity(s),
    lambda s: gm.eigv(s),
    lambda s: gm.degree(s),
    lambda s: gm.eccentricity(s),
    lambda s: gm.kle(s),
    lambda s: gm.num_sets(s),
    lambda s: gm.affinity(s),
])
def test_non_finite_entry_is_a_value_error_naming_it(measure, bad):
    with pytest.raises(ValueError, match=r"non-finite entry .* at \(1, 2\)"):
        measure(_sim_with(bad))


def test_all_unrelated_answers_reach_the_lower_bound():
    # n = 5, d = 1 off the diagonal: D = 1, p uniform, H = ln 5, SGE = 1 - ln 5 = -0.6094.
    d = 1.0 - np.eye(5)
    assert sge_from_distances(d).sge == pytest.approx(1.0 - math.log(5), abs=1e-12)
    assert round(1.0 - math.log(5), 3) == -0.609


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 9), seed=st.integers(0, 2**31 - 1))
def test_sge_lies_in_one_minus_ln_n_to_one(n, seed):
    u = np.random.default_rng(seed).uniform(0.0, 1.0, (n, n))
    d = np.triu(u, 1)
    d = d + d.T
    r = sge_from_distances(d)
    assert 1.0 - math.log(n) - 1e-12 <= r.sge <= 1.0 + 1e-12
