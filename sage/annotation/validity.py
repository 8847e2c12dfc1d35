"""Validity diagnostics for `sage correlate`: is a metric measuring what people judge?

Three tables beside the per-question correlations of `sage.annotation.correlation`:

- **Pair level.** Every edge similarity of the run (the columns of its edges.csv: cosine,
  bertscore, rouge_l, bleu, nli, judge, ...) against the labels of the pairs themselves: AUROC for
  separating pairs people call consistent (pair value > 0.5 under the chosen definition and
  aggregate) from those they call inconsistent (< 0.5; pairs at exactly 0.5 are left out and
  counted), and Spearman's rho with the pair value. 95% CIs: percentile bootstrap that resamples
  *questions* (all pairs of a drawn question together, since pairs of one question share answers).
- **Redundancy.** For each SGE column, Spearman's rho with the mean pairwise similarity of its own
  edges (`meansim_*`, over all questions of the run), and the paired bootstrap difference
  r(SGE, human) - r(meansim, human): whether the graph entropy adds anything beyond the mean.
- **Ranking.** Every measure by its correlation with human consistency (primary method, Spearman
  by default), oriented so that higher means more consistent (entropies, cluster and set counts,
  EigV, Degree, Eccentricity, KLE, D and H are negated), with its bootstrap 95% CI, Pearson's r
  and its CI (the same question resamples), the pair-level AUROC of the edge similarity the
  measure is computed from (where it is computed from one: `measure_edges`), and a paired
  bootstrap test against the best one; and the paired test of the best measure against SGE
  (`sge_<kind>`, the run's first edge similarity).
"""
from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np

from sage.annotation.correlation import (
    ROW_STATS,
    CorrelationSettings,
    _ci,
    _scipy_stat,
    bootstrap_indices,
    correlation_markdown,
    join_questions,
    metric_columns,
    paired_difference,
    run_correlation,
)
from sage.annotation.labels import label_value
from sage.errors import SageInputError

log = logging.getLogger(__name__)

# Columns where a larger value means *less* consistent.
INVERTED = re.compile(r"^(se|se_weighted|n_clusters|num_sets|eigv|degree|eccentricity|kle|D|H)_")
EDGE_ID_COLUMNS = {"model", "question_id", "kind", "key_a", "key_b", "pair_id", "text_a", "text_b"}


def oriented(metric: str) -> int:
    return -1 if INVERTED.match(metric) else 1


# ----------------------------------------------------------------------------- pair values
def pair_values(labels, pair_meta, definition: str = "entail", aggregate: str = "mean", kind: str = "answer"):
    """One row per labelled pair: pair_id, model, question_id, n_labels, value (in [0, 1])."""
    meta = pair_meta.copy()
    meta["pair_id"] = meta["pair_id"].astype(str)
    if "kind" in meta.columns:
        meta = meta[meta["kind"].fillna(kind) == kind]
    df = labels.merge(meta[["pair_id", "model", "question_id"]].drop_duplicates("pair_id"), on="pair_id")
    if df.empty:
        raise SageInputError(f"no labelled {kind} pairs with model/question ids; check --pairs and --kind")
    df["v"] = [label_value(lab, definition) for lab in df["label"]]
    rows = []
    for (pid, model, qid), g in df.groupby(["pair_id", "model", "question_id"], sort=True):
        if aggregate == "mean":
            value = g["v"].mean()
        else:
            counts = g["label"].value_counts()
            value = float(np.mean([label_value(lab, definition) for lab in counts[counts == counts.max()].index]))
        rows.append({"pair_id": pid, "model": str(model), "question_id": str(qid), "n_labels": len(g),
                     "value": round(float(value), 12)})
    import pandas as pd

    return pd.DataFrame(rows)


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half), from ranks; NaN without both classes."""
    from scipy.stats import rankdata

    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    return _scipy_stat("spearman", x, y)[0] if x.size >= 3 else float("nan")


def read_edges(path):
    """A run's edges.csv with string ids."""
    import pandas as pd

    ids = {c: str for c in ("model", "question_id", "kind", "key_a", "key_b", "pair_id")}
    try:
        edges = pd.read_csv(path, dtype=ids)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise SageInputError(f"{path}: cannot read the edges table ({type(exc).__name__}); rescore the run") from None
    for col in ("pair_id", "kind"):
        if col not in edges.columns:
            raise SageInputError(f"{path}: missing column {col!r}; pass the edges.csv written by 'sage score'")
    edges["model"] = edges["model"].fillna("").astype(str) if "model" in edges.columns else ""
    return edges


def edge_similarity_columns(edges) -> list[str]:
    """The symmetric similarity columns of an edges.csv (not the directional `*_ab`/`*_ba` ones)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return [c for c in edges.columns if c not in EDGE_ID_COLUMNS and not c.endswith(("_ab", "_ba", "_equivalent"))
            and is_numeric_dtype(edges[c]) and not is_bool_dtype(edges[c])]


def pair_validity(edges, values, kind: str = "answer", n_boot: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """AUROC and Spearman of each edge similarity against the pair labels (module docstring)."""
    e = edges[edges["kind"] == kind] if "kind" in edges.columns else edges
    joined = values.merge(e, on="pair_id", how="inner", suffixes=("", "_edge"))
    if joined.empty:
        raise SageInputError("none of the labelled pairs is in the run's edges.csv; check that labels and run belong "
                             "together (pair ids come from the responses' question_id, paraphrase_id and sample)")
    value = joined["value"].to_numpy(float)
    decided = value != 0.5
    positive = value > 0.5
    groups = joined.groupby(["model", "question_id"], sort=True).indices
    members = list(groups.values())
    idx = bootstrap_indices(len(members), n_boot, seed) if n_boot else np.zeros((0, 0), int)
    out = []
    for col in edge_similarity_columns(e):
        x = joined[col].to_numpy(float)
        ok = np.isfinite(x)
        boot_auc, boot_rho = [], []
        for draw in idx:
            rows = np.concatenate([members[k] for k in draw])
            rows = rows[ok[rows]]
            d = rows[decided[rows]]
            boot_auc.append(auroc(x[d], positive[d]))
            boot_rho.append(_spearman(x[rows], value[rows]))
        d_all = ok & decided
        out.append({
            "similarity": col, "kind": kind, "auroc": auroc(x[d_all], positive[d_all]),
            "auroc_ci95": list(_ci(np.array(boot_auc, float))), "spearman": _spearman(x[ok], value[ok]),
            "spearman_ci95": list(_ci(np.array(boot_rho, float))), "n_pairs": int(ok.sum()),
            "n_consistent": int((ok & positive).sum()), "n_inconsistent": int((d_all & ~positive).sum()),
            "n_tied": int((ok & ~decided).sum()), "n_questions": len(members),
        })
    out.sort(key=lambda r: -np.nan_to_num(r["auroc"], nan=-1.0))
    return out


# ----------------------------------------------------------------------------- redundancy, ranking
def redundancy(questions, joined, n_boot: int = 1000, seed: int = 0, method: str = "spearman") -> list[dict]:
    """Each SGE column against the mean similarity of its own edges (module docstring)."""
    out = []
    for col in [c for c in questions.columns if c.startswith("sge_")]:
        mean_col = "meansim" + col[3:]
        if mean_col not in questions.columns:
            continue
        x, y = questions[col].to_numpy(float), questions[mean_col].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        r = _scipy_stat(method, x, y)[0] if x.size >= 3 else float("nan")
        boot = np.array([])
        if x.size >= 3 and n_boot:
            idx = bootstrap_indices(x.size, n_boot, seed)
            boot = ROW_STATS[method](x[idx], y[idx])
        rec = {"sge": col, "meansim": mean_col, "method": method, "r_sge_meansim": r,
               "ci95": list(_ci(boot)) if boot.size else [float("nan")] * 2, "n_questions": int(ok.sum())}
        if joined is not None and col in joined.columns and mean_col in joined.columns and n_boot:
            try:
                d = paired_difference(joined, col, mean_col, method, n_boot, seed)
                rec.update({"r_sge_human": d["r_a"], "r_meansim_human": d["r_b"], "difference": d["difference"],
                            "difference_ci95": [d["ci95_low"], d["ci95_high"]], "p_value": d["p_value"]})
            except SageInputError as exc:
                log.info("redundancy: %s", exc)
        out.append(rec)
    return out


def ranking(joined, metrics: list[str], method: str = "spearman", n_boot: int = 1000, seed: int = 0,
            measure_edges: dict[str, str] | None = None, pairs: list[dict] | None = None,
            kind: str = "answer") -> tuple[list[dict], dict | None]:
    """Measures by oriented correlation with human consistency, each tested against the best one,
    and the paired test of the best against SGE (module docstring). Returns (rows, vs_sge)."""
    frame = joined.copy()
    auc = {p["similarity"]: p for p in pairs or []}
    rows = []
    for m in metrics:
        if m not in frame.columns:
            continue
        frame[m] = oriented(m) * frame[m].astype(float)
        x, h = frame[m].to_numpy(float), frame["human"].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(h)
        x, h = x[ok], h[ok]
        row = {"metric": m, "orientation": oriented(m), "n_questions": int(ok.sum())}
        idx = bootstrap_indices(x.size, n_boot, seed) if x.size >= 3 and n_boot else None
        for key, name in (("r", method), ("pearson", "pearson")):
            row[key] = _scipy_stat(name, x, h)[0] if x.size >= 3 else float("nan")
            row[f"{key}_ci95"] = list(_ci(ROW_STATS[name](x[idx], h[idx]))) if idx is not None else [float("nan")] * 2
        edge = (measure_edges or {}).get(m)
        if edge is not None:
            row["edge"] = edge
            row["edge_auroc"] = auc[edge]["auroc"] if edge in auc else float("nan")
            row["edge_auroc_ci95"] = auc[edge]["auroc_ci95"] if edge in auc else [float("nan")] * 2
        rows.append(row)
    rows.sort(key=lambda r: -r["r"] if np.isfinite(r["r"]) else np.inf)
    if not rows or not np.isfinite(rows[0]["r"]):
        return rows, None
    best = rows[0]["metric"]
    for r in rows:
        r["best"] = best
        if r["metric"] == best or not np.isfinite(r["r"]) or not n_boot:
            continue
        d = paired_difference(frame, best, r["metric"], method, n_boot, seed)
        r.update({"difference_from_best": -d["difference"], "ci95": [-d["ci95_high"], -d["ci95_low"]],
                  "p_value": d["p_value"]})
    sge = f"sge_{kind}"
    vs_sge = None
    if sge in frame.columns and sge in metrics and n_boot:
        if best == sge:
            vs_sge = {"best": best, "sge": sge, "note": "the best measure is SGE itself"}
        else:
            d = paired_difference(frame, best, sge, method, n_boot, seed)
            vs_sge = {"best": best, "sge": sge, "method": method, "r_best": d["r_a"], "r_sge": d["r_b"],
                      "difference": d["difference"], "ci95": [d["ci95_low"], d["ci95_high"]],
                      "p_value": d["p_value"], "n_questions": d["n_questions"]}
    return rows, vs_sge


def run_validity(labels, pair_meta, questions, human, edges=None,
                 settings: CorrelationSettings = CorrelationSettings(),
                 measure_edges: dict[str, str] | None = None) -> dict[str, Any]:
    """The three tables; `human` is the per-question human consistency `run_correlation` used;
    `measure_edges`: questions.csv column -> edge similarity (`sage.metrics.question_metrics`)."""
    kind, n_boot, seed, method = settings.kind, settings.n_boot, settings.seed, settings.primary
    joined, _ = join_questions(human, questions)
    result: dict[str, Any] = {"method": method, "n_boot": n_boot, "seed": seed, "kind": kind}
    if edges is not None:
        values = pair_values(labels, pair_meta, settings.definition, settings.aggregate, kind)
        result["pairs"] = pair_validity(edges, values, kind, n_boot, seed)
    else:
        result["pairs"] = []
        result["pairs_note"] = "the run has no edges.csv (scored by an older sage); rescore to get pair-level validity"
    result["redundancy"] = redundancy(questions, joined, n_boot, seed, method)
    result["ranking"], result["best_vs_sge"] = ranking(joined, list(settings.metrics or []), method, n_boot, seed,
                                                       measure_edges, result["pairs"], kind)
    return result


def labels_report(labels_path, responses, questions, edges=None, *, metrics=None, methods=("spearman",),
                  n_boot: int = 1000, seed: int = 0, measure_edges: dict[str, str] | None = None,
                  kind: str = "answer") -> dict[str, Any]:
    """`sage correlate`'s tables for a scored run held in memory (responses, questions and edges
    tables of a `ScoreResult`): correlations with people, validity, and their markdown. Label rows
    that match no pair are skipped and counted (`--ignore-unknown`)."""
    import pandas as pd

    from sage.annotation.importer import read_labels
    from sage.annotation.pairs import build_pairs

    pairs = build_pairs(responses, (kind,)).pairs
    ls = read_labels(labels_path, pairs, responses, None, None, True, kind, None)
    cols = metric_columns(questions, tuple(metrics) if metrics else None)
    settings = CorrelationSettings(kind=kind, metrics=tuple(cols), methods=tuple(methods), n_boot=n_boot, seed=seed)
    corr = run_correlation(ls.labels, pairs, questions, settings)
    val = run_validity(ls.labels, pairs, questions, pd.DataFrame(corr["human"]), edges, settings, measure_edges)
    return {"correlation": corr, "validity": val, "skipped_label_rows": ls.counts["unmatched"],
            "markdown": correlation_markdown(corr) + validity_markdown(val)}


# ----------------------------------------------------------------------------- markdown
def _f(v, digits=3) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


def _ci_text(ci) -> str:
    return "n/a" if not ci or not all(np.isfinite(ci)) else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def validity_markdown(v: dict[str, Any]) -> str:
    lines = ["", "## Pair-level validity of each edge similarity", ""]
    if v.get("pairs"):
        lines += [f"{v['kind']} pairs; consistent = pair value > 0.5; 95% CIs resample questions "
                  f"({v['n_boot']} resamples, seed {v['seed']}).", "",
                  "| similarity | AUROC | 95% CI | Spearman | 95% CI | pairs | consistent / inconsistent / tied |",
                  "|---|---|---|---|---|---|---|"]
        for r in v["pairs"]:
            lines.append(f"| {r['similarity']} | {_f(r['auroc'])} | {_ci_text(r['auroc_ci95'])} | {_f(r['spearman'])} | "
                         f"{_ci_text(r['spearman_ci95'])} | {r['n_pairs']} | "
                         f"{r['n_consistent']} / {r['n_inconsistent']} / {r['n_tied']} |")
    else:
        lines.append(v.get("pairs_note", "no pair-level results"))
    lines += ["", "## Redundancy: SGE against the mean similarity of its own edges", "",
              f"| SGE | mean similarity | {v['method']}(SGE, mean) | 95% CI | r(SGE, human) | r(mean, human) | "
              "difference | 95% CI | p |", "|---|---|---|---|---|---|---|---|---|"]
    for r in v["redundancy"]:
        lines.append(f"| {r['sge']} | {r['meansim']} | {_f(r['r_sge_meansim'])} | {_ci_text(r['ci95'])} | "
                     f"{_f(r.get('r_sge_human'))} | {_f(r.get('r_meansim_human'))} | {_f(r.get('difference'))} | "
                     f"{_ci_text(r.get('difference_ci95'))} | {_f(r.get('p_value'), 3)} |")
    lines += ["", f"## Metrics ranked by agreement with people ({v['method']}, oriented: higher = more consistent)", "",
              f"{v['method']} and Pearson with 95% bootstrap CIs over questions; edge AUROC: the pair-level AUROC "
              "of the edge similarity the measure is computed from; r - r(best): paired bootstrap difference.", "",
              f"| rank | measure | {v['method']} | 95% CI | Pearson | 95% CI | edge | edge AUROC | r - r(best) | 95% CI "
              "| p | n |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, r in enumerate(v["ranking"], 1):
        name = r["metric"] + (" (negated)" if r["orientation"] < 0 else "")
        diff = "best" if r["metric"] == r.get("best") else _f(r.get("difference_from_best"))
        lines.append(f"| {k} | {name} | {_f(r['r'])} | {_ci_text(r.get('r_ci95'))} | {_f(r.get('pearson'))} | "
                     f"{_ci_text(r.get('pearson_ci95'))} | {r.get('edge', '')} | {_f(r.get('edge_auroc'))} | {diff} | "
                     f"{_ci_text(r.get('ci95'))} | {_f(r.get('p_value'))} | {r['n_questions']} |")
    b = v.get("best_vs_sge")
    if b:
        lines += [""]
        if "note" in b:
            lines.append(f"Best measure against SGE: {b['note']} ({b['sge']}).")
        else:
            lines.append(f"Best measure against SGE ({b['method']}, paired bootstrap over questions): {b['best']} "
                         f"{_f(b['r_best'])} vs {b['sge']} {_f(b['r_sge'])}, difference {_f(b['difference'])} "
                         f"{_ci_text(b['ci95'])}, p = {_f(b['p_value'])}, {b['n_questions']} questions.")
    return "\n".join(lines) + "\n"
