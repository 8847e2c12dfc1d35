"""Inter-annotator agreement: Fleiss' kappa (statsmodels), Krippendorff's alpha (krippendorff),
per-annotator label distributions and percentile-bootstrap 95% CIs over items.

Skipped items: Krippendorff's alpha uses every item with at least two labels (it handles missing
values natively). Fleiss' kappa needs the same number of ratings per item, so it uses the items
with the most common number of ratings (>= 2); how many items that leaves out is reported.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from sage.annotation.labels import SCHEMES
from sage.errors import SageInputError

log = logging.getLogger(__name__)


def rating_matrix(labels, scheme: str) -> tuple[np.ndarray, list[str], list[str]]:
    """annotators x items matrix of category codes (NaN = not rated), annotators, item ids."""
    cats = {c: i for i, c in enumerate(SCHEMES[scheme])}
    annotators = sorted(labels["annotator"].unique().tolist())
    items = sorted(labels["pair_id"].unique().tolist())
    a_idx = {a: i for i, a in enumerate(annotators)}
    i_idx = {p: i for i, p in enumerate(items)}
    mat = np.full((len(annotators), len(items)), np.nan)
    for a, p, lab in zip(labels["annotator"], labels["pair_id"], labels["label"]):
        mat[a_idx[a], i_idx[p]] = cats[lab]
    return mat, annotators, items


def count_table(mat: np.ndarray, n_categories: int) -> np.ndarray:
    """items x categories counts (the table Fleiss' kappa takes)."""
    out = np.zeros((mat.shape[1], n_categories))
    for c in range(n_categories):
        out[:, c] = (mat == c).sum(axis=0)
    return out


def fleiss(table: np.ndarray) -> float:
    from statsmodels.stats.inter_rater import fleiss_kappa

    if table.shape[0] < 2:
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(fleiss_kappa(table, method="fleiss"))


def kalpha(mat: np.ndarray, n_categories: int) -> float:
    import krippendorff

    if mat.shape[1] < 2 or np.isnan(mat).all():
        return float("nan")
    observed = np.unique(mat[~np.isnan(mat)])
    if observed.size < 2:  # one category only: alpha is undefined; perfect agreement means 1 by convention
        return 1.0 if (np.sum(~np.isnan(mat), axis=0) >= 2).any() else float("nan")
    return float(krippendorff.alpha(reliability_data=mat, level_of_measurement="nominal",
                                     value_domain=list(range(n_categories))))


def _percentile_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(values, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def agreement(labels, scheme: str, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Agreement statistics with bootstrap CIs (items resampled with replacement)."""
    if n_boot < 0:
        raise SageInputError("--n-boot must be >= 0")
    k = len(SCHEMES[scheme])
    mat, annotators, items = rating_matrix(labels, scheme)
    per_item = (~np.isnan(mat)).sum(axis=0)
    multi = per_item >= 2
    if multi.sum() < 2:
        raise SageInputError(
            f"agreement needs at least two items rated by two or more annotators (found {int(multi.sum())}); "
            f"collect more overlapping labels"
        )
    n_mode = int(np.bincount(per_item[multi]).argmax())
    full = per_item == n_mode
    table = count_table(mat, k)
    kappa = fleiss(table[full])
    alpha = kalpha(mat[:, multi], k)
    rng = np.random.default_rng(seed)
    boot_k, boot_a = np.full(n_boot, np.nan), np.full(n_boot, np.nan)
    full_idx, multi_idx = np.flatnonzero(full), np.flatnonzero(multi)
    for b in range(n_boot):
        boot_k[b] = fleiss(table[rng.choice(full_idx, size=full_idx.size, replace=True)])
        boot_a[b] = kalpha(mat[:, rng.choice(multi_idx, size=multi_idx.size, replace=True)], k)
    dist = {}
    for a, row in zip(annotators, mat):
        rated = row[~np.isnan(row)]
        dist[a] = {
            "n_labels": int(rated.size),
            "n_skipped": int(len(items) - rated.size),
            **{c: int((rated == i).sum()) for i, c in enumerate(SCHEMES[scheme])},
        }
    overall = {c: int((mat == i).sum()) for i, c in enumerate(SCHEMES[scheme])}
    return {
        "scheme": scheme,
        "n_items": len(items),
        "n_annotators": len(annotators),
        "n_labels": int((~np.isnan(mat)).sum()),
        "fleiss_kappa": kappa,
        "fleiss_kappa_ci95": _percentile_ci(boot_k),
        "fleiss_items": int(full.sum()),
        "fleiss_ratings_per_item": n_mode,
        "fleiss_items_left_out": int(len(items) - full.sum()),
        "krippendorff_alpha": alpha,
        "krippendorff_alpha_ci95": _percentile_ci(boot_a),
        "krippendorff_items": int(multi.sum()),
        "items_with_one_label": int((per_item == 1).sum()),
        "observed_agreement": _observed_agreement(table[multi]),
        "label_distribution": overall,
        "per_annotator": dist,
        "n_boot": n_boot,
        "n_boot_undefined": {"fleiss_kappa": int(np.isnan(boot_k).sum()), "krippendorff_alpha": int(np.isnan(boot_a).sum())},
        "seed": seed,
    }


def _observed_agreement(table: np.ndarray) -> float:
    """Mean share of agreeing rater pairs per item (items with >= 2 ratings)."""
    n = table.sum(axis=1)
    return float(np.mean((np.sum(table * (table - 1), axis=1)) / (n * (n - 1))))


def agreement_markdown(result: dict[str, Any]) -> str:
    def ci(v):
        return f"[{v[0]:.3f}, {v[1]:.3f}]"

    lines = [
        f"# Inter-annotator agreement ({result['scheme']})", "",
        f"{result['n_items']} items, {result['n_annotators']} annotators, {result['n_labels']} labels; "
        f"bootstrap {result['n_boot']} resamples of items, seed {result['seed']}.", "",
        "| statistic | value | 95% CI | items |", "|---|---|---|---|",
        f"| Fleiss' kappa | {result['fleiss_kappa']:.3f} | {ci(result['fleiss_kappa_ci95'])} | "
        f"{result['fleiss_items']} ({result['fleiss_ratings_per_item']} ratings each; {result['fleiss_items_left_out']} left out) |",
        f"| Krippendorff's alpha (nominal) | {result['krippendorff_alpha']:.3f} | "
        f"{ci(result['krippendorff_alpha_ci95'])} | {result['krippendorff_items']} |",
        f"| observed agreement | {result['observed_agreement']:.3f} | | {result['krippendorff_items']} |", "",
        "| annotator | labels | skipped | " + " | ".join(SCHEMES[result["scheme"]]) + " |",
        "|---|---|---|" + "---|" * len(SCHEMES[result["scheme"]]),
    ]
    for a, d in result["per_annotator"].items():
        lines.append(f"| {a} | {d['n_labels']} | {d['n_skipped']} | " + " | ".join(str(d[c]) for c in SCHEMES[result["scheme"]]) + " |")
    return "\n".join(lines) + "\n"
