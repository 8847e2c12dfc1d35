"""Agreement: Fleiss' kappa and Krippendorff's alpha against independent reference computations,
synthetic annotators with known agreement, skipped items, bootstrap CIs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_annotation_data import synthetic_annotators

from sage.annotation.agreement import (
    agreement,
    agreement_markdown,
    count_table,
    rating_matrix,
)
from sage.errors import SageInputError

CATS = ("entailment", "neutral", "contradiction")


def ref_fleiss(table: np.ndarray) -> float:
    """Fleiss (1971), written out: P_i = (sum n_ij^2 - n) / (n (n - 1)); kappa = (P - Pe) / (1 - Pe)."""
    n = table.sum(axis=1)[0]
    p_j = table.sum(axis=0) / table.sum()
    P_i = ((table ** 2).sum(axis=1) - n) / (n * (n - 1))
    Pbar, Pe = P_i.mean(), (p_j ** 2).sum()
    return (Pbar - Pe) / (1 - Pe)


def ref_kalpha(units: list[list[int]]) -> float:
    """Krippendorff's nominal alpha from the coincidence matrix; units = the values each item got."""
    cats = sorted({v for u in units for v in u})
    idx = {c: i for i, c in enumerate(cats)}
    o = np.zeros((len(cats), len(cats)))
    for u in units:
        m = len(u)
        if m < 2:
            continue
        for a in range(m):
            for b in range(m):
                if a != b:
                    o[idx[u[a]], idx[u[b]]] += 1 / (m - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    d_o = o.sum() - np.trace(o)
    d_e = (n * n - (n_c ** 2).sum()) / (n - 1)
    return 1 - d_o / d_e


def _long(mat):
    return pd.DataFrame([{"pair_id": f"i{j:03d}", "annotator": f"r{a}", "label": CATS[v]}
                         for a, row in enumerate(mat) for j, v in enumerate(row) if v is not None])


def test_fleiss_matches_reference_on_full_data():
    rng = np.random.default_rng(5)
    mat = rng.integers(0, 3, size=(4, 40)).tolist()
    mat[1][:20] = mat[0][:20]  # some agreement
    labels = _long(mat)
    res = agreement(labels, "nli", n_boot=0)
    m, _, _ = rating_matrix(labels, "nli")
    assert res["fleiss_kappa"] == pytest.approx(ref_fleiss(count_table(m, 3)), abs=1e-12)
    assert res["fleiss_items_left_out"] == 0 and res["fleiss_ratings_per_item"] == 4


@settings(max_examples=30, deadline=None)
@given(data=st.lists(st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=3, max_size=3), min_size=4, max_size=30))
def test_krippendorff_matches_reference_with_missing(data):
    mat = [list(col) for col in zip(*data)]  # 3 annotators x items, None = skipped
    units = [[v for v in item if v is not None] for item in data]
    rated = [u for u in units if len(u) >= 2]
    if len(rated) < 2 or len({v for u in rated for v in u}) < 2:
        return
    res = agreement(_long(mat), "nli", n_boot=0)
    assert res["krippendorff_alpha"] == pytest.approx(ref_kalpha(rated), abs=1e-9)
    assert res["items_with_one_label"] == sum(1 for u in units if len(u) == 1)


@pytest.mark.parametrize("p", [0.9, 0.6])
def test_synthetic_annotators_known_agreement(p):
    labels = synthetic_annotators(2000, p, n_annotators=3, seed=11)
    res = agreement(labels, "nli", n_boot=200, seed=3)
    assert res["fleiss_kappa"] == pytest.approx(p ** 2, abs=0.04)
    assert res["krippendorff_alpha"] == pytest.approx(p ** 2, abs=0.04)
    lo, hi = res["fleiss_kappa_ci95"]
    assert lo < p ** 2 < hi and hi - lo < 0.1
    lo, hi = res["krippendorff_alpha_ci95"]
    assert lo < p ** 2 < hi


def test_skipping_annotators():
    labels = synthetic_annotators(600, 0.8, n_annotators=3, seed=2, skip=0.2)
    res = agreement(labels, "nli", n_boot=50)
    per_item = labels.groupby("pair_id").size()
    assert res["fleiss_items"] == int((per_item == 3).sum())
    assert res["fleiss_items_left_out"] == res["n_items"] - res["fleiss_items"] > 0
    assert res["krippendorff_items"] == int((per_item >= 2).sum())
    for a, d in res["per_annotator"].items():
        assert d["n_labels"] == int((labels.annotator == a).sum())
        assert d["n_labels"] + d["n_skipped"] == res["n_items"]
        assert sum(d[c] for c in CATS) == d["n_labels"]
    assert res["krippendorff_alpha"] == pytest.approx(0.64, abs=0.08)
    assert "Fleiss' kappa" in agreement_markdown(res)


def test_perfect_agreement_and_binary():
    labels = pd.DataFrame([{"pair_id": f"p{i}", "annotator": a, "label": "same" if i % 2 else "different"}
                           for i in range(10) for a in ("x", "y")])
    res = agreement(labels, "binary", n_boot=20)
    assert res["fleiss_kappa"] == pytest.approx(1.0) and res["krippendorff_alpha"] == pytest.approx(1.0)
    assert res["observed_agreement"] == 1.0 and res["label_distribution"] == {"same": 10, "different": 10}


def test_too_little_overlap():
    labels = pd.DataFrame([{"pair_id": f"p{i}", "annotator": f"a{i}", "label": "same"} for i in range(5)])
    with pytest.raises(SageInputError, match="at least two items rated by two or more annotators"):
        agreement(labels, "binary")
