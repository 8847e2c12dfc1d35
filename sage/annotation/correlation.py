"""Metric validity: per-question human consistency against every metric column of a run.

Human consistency of a question (model, question_id) is computed from its labelled pairs:

- each label gets a value under the *definition*: `entail` (entailment = 1, else 0; the default),
  `not-contradict` (contradiction = 0, else 1) or `graded` (entailment 1, neutral 0.5,
  contradiction 0); binary labels are same = 1, different = 0 under every definition;
- *aggregate* `mean` (default): a pair's value is the mean over its annotators; `majority`: the
  value of the pair's most frequent label (ties: mean of the tied labels' values);
- the question's human consistency is the mean over its labelled pairs.

Correlations (Spearman, Kendall tau-b, Pearson) are computed over questions; 95% CIs are
percentile bootstrap CIs from resampling questions with replacement, the same resamples for every
metric, so two metrics can be compared on identical resamples (paired bootstrap). The paired test
reports the observed difference r(m1) - r(m2), its 95% CI and a two-sided bootstrap p-value
2 * min(P*(d <= 0), P*(d >= 0)) with the (count + 1) / (B + 1) correction, capped at 1.
Resamples where a statistic is undefined (a constant column) are counted and left out of its CI.
"""
from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from sage.annotation.labels import label_value
from sage.data.files import read_table
from sage.errors import SageInputError

log = logging.getLogger(__name__)

METHODS = ("spearman", "kendall", "pearson")
DEFINITIONS = ("entail", "not-contradict", "graded")
AGGREGATES = ("mean", "majority")
DEFAULT_METRIC_PATTERNS = ("sge_*", "se_*", "n_clusters_*", "num_sets_*", "eigv_*", "degree_*", "eccentricity_*",
                           "kle_*", "bleu_*", "rouge*", "bertscore_*", "cosine_*")
ID_COLUMNS = ("model", "question_id", "n")


# ----------------------------------------------------------------------------- human consistency
def human_consistency(labels, pair_meta, definition: str = "entail", aggregate: str = "mean",
                      kind: str | None = "answer"):
    """DataFrame model, question_id, n_pairs, n_labels, human (see module docstring)."""

    if definition not in DEFINITIONS:
        raise SageInputError(f"unknown definition {definition!r}; choose one of {', '.join(DEFINITIONS)}")
    if aggregate not in AGGREGATES:
        raise SageInputError(f"unknown aggregate {aggregate!r}; choose one of {', '.join(AGGREGATES)}")
    need = {"pair_id", "model", "question_id"}
    missing = need - set(pair_meta.columns)
    if missing:
        raise SageInputError(f"pair metadata lacks {sorted(missing)}; pass --pairs with the export's pairs file")
    meta = pair_meta.copy()
    meta["pair_id"] = meta["pair_id"].astype(str)
    if kind is not None and "kind" in meta.columns:
        meta = meta[meta["kind"].fillna(kind) == kind]
    df = labels.merge(meta[["pair_id", "model", "question_id"]], on="pair_id", how="inner")
    if df.empty:
        raise SageInputError(f"no labelled {kind or ''} pairs with model/question ids; check --pairs and --kind")
    unmatched = labels["pair_id"].nunique() - df["pair_id"].nunique()
    if unmatched:
        log.info("%d labelled pairs are not %s pairs or lack metadata; left out", unmatched, kind)
    df["value"] = [label_value(lab, definition) for lab in df["label"]]
    if aggregate == "mean":
        per_pair = df.groupby(["model", "question_id", "pair_id"], sort=True)["value"].mean()
    else:
        def majority(g):
            c = g["label"].value_counts()
            top = c[c == c.max()].index
            return float(np.mean([label_value(lab, definition) for lab in top]))

        per_pair = df.groupby(["model", "question_id", "pair_id"], sort=True)[["label"]].apply(majority)
    per_pair = per_pair.rename("value").reset_index()
    out = per_pair.groupby(["model", "question_id"], sort=True).agg(n_pairs=("value", "size"), human=("value", "mean"))
    # Means of label values: mathematically equal shares (e.g. 13/30 reached by different sums) must
    # tie exactly, or rank correlations would break those ties by floating-point noise.
    out["human"] = out["human"].round(12)
    out["n_labels"] = df.groupby(["model", "question_id"], sort=True).size()
    out = out.reset_index()
    out["model"] = out["model"].fillna("").astype(str)
    out["question_id"] = out["question_id"].astype(str)
    out.attrs["left_out_pairs"] = int(unmatched)
    return out


# ----------------------------------------------------------------------------- vectorised statistics
def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    den = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (xc * yc).sum(axis=1) / den
    r[~(den > 1e-12 * np.maximum(1.0, np.abs(xc).max(axis=1) * np.abs(yc).max(axis=1)))] = np.nan
    return np.clip(r, -1.0, 1.0)


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return _pearson_rows(rankdata(x, axis=1), rankdata(y, axis=1))


def _kendall_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b per row: sum sign(dx) sign(dy) / sqrt(#untied-x pairs * #untied-y pairs)."""
    n = x.shape[1]
    out = np.empty(x.shape[0])
    step = max(1, int(4_000_000 // max(1, n * n)))
    for s in range(0, x.shape[0], step):
        xs, ys = x[s:s + step], y[s:s + step]
        sx = np.sign(xs[:, :, None] - xs[:, None, :])
        sy = np.sign(ys[:, :, None] - ys[:, None, :])
        num = (sx * sy).sum(axis=(1, 2))
        den = np.sqrt(np.count_nonzero(sx, axis=(1, 2)).astype(float) * np.count_nonzero(sy, axis=(1, 2)))
        with np.errstate(divide="ignore", invalid="ignore"):
            out[s:s + step] = np.where(den > 0, num / den, np.nan)
    return out


ROW_STATS = {"spearman": _spearman_rows, "kendall": _kendall_rows, "pearson": _pearson_rows}


def _scipy_stat(method: str, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    from scipy import stats

    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    fn = {"spearman": stats.spearmanr, "kendall": stats.kendalltau, "pearson": stats.pearsonr}[method]
    res = fn(x, y)
    return float(res[0]), float(res[1])


def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _ci(values: np.ndarray) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(v, [2.5, 97.5])
    return float(lo), float(hi)


# ----------------------------------------------------------------------------- correlation
_RESCORE = "re-run 'sage score' to write it again"
_NAN_SPELLINGS = {"nan", "na", "n/a", "null", "none"}


def read_question_scores(path):
    """questions.csv of a run: ids as strings, metric columns numeric (blank cells = undefined = NaN).

    The file must be whole: a row cut short or with extra fields, a file ending inside a quoted
    field or mid-row, or a text in a metric column (`DEFAULT_METRIC_PATTERNS`, `n`) is one line
    naming the file, row and column."""
    import pandas as pd

    q = read_table(path, as_strings=True, empty_hint=_RESCORE, complete_rows=_RESCORE)
    for col in ("model", "question_id"):
        if col not in q.columns:
            raise SageInputError(f"{path}: missing column {col!r}; pass the questions.csv written by 'sage score'")
    for col in q.columns:
        if col in ("model", "question_id", "question"):
            continue
        converted = pd.to_numeric(q[col], errors="coerce")
        if col == "n" or any(fnmatch.fnmatchcase(col, p) for p in DEFAULT_METRIC_PATTERNS):
            text = q[col].astype(str).str.strip()
            bad = converted.isna() & text.ne("") & ~text.str.lower().isin(_NAN_SPELLINGS)
            if bad.any():
                i = int(bad.to_numpy().nonzero()[0][0])
                raise SageInputError(f"{path}: row {i + 2} column {col!r}: {q[col].iloc[i]!r} is not a number; "
                                     f"fix the cell (blank = undefined) or {_RESCORE}")
            q[col] = converted
            continue
        if converted.notna().sum() >= (q[col].astype(str).str.strip() != "").sum():
            q[col] = converted
    q["model"] = q["model"].astype(str)
    q["question_id"] = q["question_id"].astype(str)
    return q


def metric_columns(questions, patterns: tuple[str, ...] | None = None) -> list[str]:
    """Numeric metric columns of questions.csv matching the glob patterns (default: SGE, baselines)."""
    pats = patterns or DEFAULT_METRIC_PATTERNS
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    numeric = [c for c in questions.columns if c not in ID_COLUMNS
               and is_numeric_dtype(questions[c]) and not is_bool_dtype(questions[c])]
    cols = [c for c in numeric if any(fnmatch.fnmatchcase(c, p) for p in pats)]
    if not cols:
        raise SageInputError(
            f"no metric columns match {list(pats)}; numeric columns are {numeric or 'none'}; pass --metric"
        )
    return cols


def join_questions(human, questions, source: str = "questions.csv"):
    """Inner join of human consistency and questions.csv on (model, question_id), with counts."""
    q = questions.copy()
    for col in ("model", "question_id"):
        if col not in q.columns:
            raise SageInputError(f"{source}: missing column {col!r}; pass the questions.csv written by 'sage score'")
    q["model"] = q["model"].fillna("").astype(str)
    q["question_id"] = q["question_id"].astype(str)
    if q.duplicated(["model", "question_id"]).any():
        dup = q[q.duplicated(["model", "question_id"])].iloc[0]
        raise SageInputError(f"{source}: model {dup['model']!r} question {dup['question_id']!r} occurs twice")
    joined = human.merge(q, on=["model", "question_id"], how="inner", suffixes=("", "_metric"))
    counts = {
        "questions_with_labels": int(len(human)),
        "questions_in_run": int(len(q)),
        "questions_joined": int(len(joined)),
        "labelled_questions_not_in_run": int(len(human) - len(joined)),
    }
    if joined.empty:
        ex = human.iloc[0]
        raise SageInputError(
            f"{source}: none of the labelled questions are in the run (e.g. model {ex['model']!r} question "
            f"{ex['question_id']!r}); check that labels and run belong together"
        )
    return joined, counts


def correlate(joined, metrics: list[str], methods: tuple[str, ...] = METHODS, n_boot: int = 1000,
              seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One record per (metric, method): r, p, 95% CI, n. Also returns the per-metric bootstrap draws."""
    for m in methods:
        if m not in METHODS:
            raise SageInputError(f"unknown correlation method {m!r}; choose from {', '.join(METHODS)}")
    if n_boot < 0:
        raise SageInputError("--n-boot must be >= 0")
    h_all = joined["human"].to_numpy(float)
    idx_all = None
    records, draws = [], {}
    for metric in metrics:
        if metric not in joined.columns:
            raise SageInputError(f"questions.csv has no column {metric!r}")
        x = joined[metric].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(h_all)
        x, h = x[ok], h_all[ok]
        n = int(ok.sum())
        idx = bootstrap_indices(n, n_boot, seed) if n else np.zeros((0, 0), int)
        if n == len(h_all):
            idx_all = idx
        for method in methods:
            r, p = _scipy_stat(method, x, h) if n >= 3 else (float("nan"), float("nan"))
            boot = ROW_STATS[method](x[idx], h[idx]) if n >= 3 and n_boot else np.array([])
            draws[(metric, method)] = (boot, n == len(h_all))
            lo, hi = _ci(boot)
            records.append({
                "metric": metric, "method": method, "r": r, "p_value": p, "ci95_low": lo, "ci95_high": hi,
                "n_questions": n, "n_missing_metric": int(len(h_all) - n),
                "n_boot_undefined": int(np.isnan(boot).sum()) if boot.size else n_boot,
            })
    return records, {"draws": draws, "complete_indices": idx_all}


def paired_difference(joined, metric_a: str, metric_b: str, method: str = "spearman", n_boot: int = 1000,
                      seed: int = 0) -> dict[str, Any]:
    """Paired bootstrap of r(metric_a, human) - r(metric_b, human) on the same question resamples."""
    for m in (metric_a, metric_b):
        if m not in joined.columns:
            raise SageInputError(f"questions.csv has no column {m!r} to compare")
    if n_boot < 1:
        raise SageInputError("the paired test needs --n-boot >= 1")
    a, b, h = (joined[c].to_numpy(float) for c in (metric_a, metric_b, "human"))
    ok = np.isfinite(a) & np.isfinite(b) & np.isfinite(h)
    a, b, h = a[ok], b[ok], h[ok]
    n = int(ok.sum())
    if n < 3:
        raise SageInputError(f"comparing {metric_a} and {metric_b} needs >= 3 questions with both values (found {n})")
    idx = bootstrap_indices(n, n_boot, seed)
    ra, rb = _scipy_stat(method, a, h)[0], _scipy_stat(method, b, h)[0]
    d = ROW_STATS[method](a[idx], h[idx]) - ROW_STATS[method](b[idx], h[idx])
    valid = d[np.isfinite(d)]
    B = valid.size
    p = min(1.0, 2 * min((np.sum(valid <= 0) + 1) / (B + 1), (np.sum(valid >= 0) + 1) / (B + 1))) if B else float("nan")
    lo, hi = _ci(d)
    return {
        "metric_a": metric_a, "metric_b": metric_b, "method": method, "r_a": ra, "r_b": rb,
        "difference": ra - rb, "ci95_low": lo, "ci95_high": hi, "p_value": float(p),
        "n_questions": n, "n_boot": n_boot, "n_boot_undefined": int(n_boot - B), "seed": seed,
    }


def default_comparisons(metrics: list[str]) -> list[tuple[str, str]]:
    """SGE on answers (and on RoTs) against each baseline on the same texts."""
    out = []
    for side in ("answer", "rot"):
        sge = f"sge_{side}"
        if sge not in metrics:
            continue
        for base in ("bleu", "rouge_l", "bertscore", "cosine"):
            if f"{base}_{side}" in metrics:
                out.append((sge, f"{base}_{side}"))
    return out


def correlation_markdown(result: dict[str, Any]) -> str:
    """The paper-style row (one row per method, one column per metric) plus the detailed tables."""
    recs, metrics = result["correlations"], result["metrics"]
    by = {(r["metric"], r["method"]): r for r in recs}

    def cell(r):
        if r is None or not np.isfinite(r["r"]):
            return "n/a"
        return f"{r['r']:.3f} [{r['ci95_low']:.3f}, {r['ci95_high']:.3f}]"

    c = result["counts"]
    lines = [
        "# Metric-human correlation", "",
        f"Human consistency: definition `{result['definition']}`, aggregate `{result['aggregate']}`, "
        f"{result['kind']} pairs; {c['questions_joined']} questions "
        f"({c['labelled_questions_not_in_run']} labelled questions not in the run, "
        f"{c.get('questions_below_min_pairs', 0)} below --min-pairs). "
        f"95% CIs: percentile bootstrap over questions, {result['n_boot']} resamples, seed {result['seed']}.", "",
    ]
    lines += [f"Warning: {w}" for w in result.get("warnings", [])] + ([""] if result.get("warnings") else [])
    lines += [
        "| correlation with human | " + " | ".join(metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for method in result["methods"]:
        lines.append(f"| {method} | " + " | ".join(cell(by.get((m, method))) for m in metrics) + " |")
    lines += ["", "| metric | method | r | 95% CI | p | n |", "|---|---|---|---|---|---|"]
    for r in recs:
        lines.append(f"| {r['metric']} | {r['method']} | {r['r']:.4f} | [{r['ci95_low']:.4f}, {r['ci95_high']:.4f}] "
                     f"| {r['p_value']:.3g} | {r['n_questions']} |")
    if result.get("comparisons"):
        lines += ["", "Paired bootstrap differences (same question resamples):", "",
                  "| metric A | metric B | method | r A - r B | 95% CI | p |", "|---|---|---|---|---|---|"]
        for d in result["comparisons"]:
            lines.append(f"| {d['metric_a']} | {d['metric_b']} | {d['method']} | {d['difference']:.4f} | "
                         f"[{d['ci95_low']:.4f}, {d['ci95_high']:.4f}] | {d['p_value']:.3g} |")
    return "\n".join(lines) + "\n"


def undefined_reasons(joined, cols, definition: str) -> list[str]:
    """Why correlations are undefined (null): a side that does not vary over the joined questions."""
    out = []
    human = joined["human"].dropna()
    if len(human) and human.nunique() <= 1:
        out.append(f"every question has the same human consistency ({float(human.iloc[0]):.3f}) under --definition "
                   f"{definition}: the labels are all one class, so no correlation with people is defined (written as "
                   "null); label pairs of both kinds, or try --definition graded")
    if len(joined) < 3:
        out.append(f"only {len(joined)} question(s) joined the labels; correlations need at least 3 (written as null)")
    for col in cols:
        values = joined[col].dropna() if col in joined.columns else joined.iloc[:0, 0]
        if len(values) >= 3 and values.nunique() <= 1:
            out.append(f"metric {col} is the same ({float(values.iloc[0]):.3f}) on every joined question, so its "
                       "correlations are undefined (written as null)")
    return out


@dataclass(frozen=True)
class CorrelationSettings:
    """What decides `sage correlate`'s numbers (each is written into correlation.json)."""

    definition: str = "entail"  # what makes a labelled pair consistent (sage.annotation.labels)
    aggregate: str = "mean"  # several annotators' labels of one pair: mean or majority
    kind: str = "answer"  # answer or rot pairs
    metrics: tuple[str, ...] | None = None  # questions.csv columns; None: SGE and the baselines
    methods: tuple[str, ...] = METHODS
    n_boot: int = 1000
    seed: int = 0
    min_pairs: int = 1  # questions with fewer labelled pairs are left out (and counted)
    comparisons: tuple[tuple[str, str], ...] | None = None  # paired tests; None: SGE against each baseline
    primary: str = "spearman"  # the coefficient of the paired tests, validity and ranking


def run_correlation(labels, pair_meta, questions, settings: CorrelationSettings = CorrelationSettings()):
    """Everything `sage correlate` writes: human per question, correlations, paired tests, counts."""
    definition, aggregate, kind = settings.definition, settings.aggregate, settings.kind
    n_boot, seed, min_pairs, methods = settings.n_boot, settings.seed, settings.min_pairs, settings.methods
    human = human_consistency(labels, pair_meta, definition, aggregate, kind)
    below = human["n_pairs"] < min_pairs
    human_used = human[~below]
    if human_used.empty:
        raise SageInputError(f"no question has >= {min_pairs} labelled pairs; lower --min-pairs")
    joined, counts = join_questions(human_used, questions)
    counts["questions_below_min_pairs"] = int(below.sum())
    counts["labelled_pairs_left_out"] = human.attrs.get("left_out_pairs", 0)
    cols = list(settings.metrics) if settings.metrics else metric_columns(questions)
    recs, _ = correlate(joined, cols, tuple(methods), n_boot, seed)
    comps = default_comparisons(cols) if settings.comparisons is None else settings.comparisons
    diffs = [paired_difference(joined, a, b, settings.primary, n_boot, seed) for a, b in comps] if n_boot else []
    return {
        "definition": definition, "aggregate": aggregate, "kind": kind, "methods": list(methods),
        "metrics": cols, "n_boot": n_boot, "seed": seed, "min_pairs": min_pairs, "counts": counts,
        "correlations": recs, "comparisons": diffs, "warnings": undefined_reasons(joined, cols, definition),
        "human": joined[["model", "question_id", "n_pairs", "n_labels", "human"]].to_dict(orient="records"),
    }
