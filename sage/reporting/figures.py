"""Matplotlib figures (Agg canvas, no pyplot global state) returned as base64 PNG strings."""
from __future__ import annotations

import base64
import io
import logging

import numpy as np

log = logging.getLogger(__name__)


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_base64(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def histograms(questions, columns: list[str], labels: dict[str, str] | None = None) -> str:
    """One panel per column: per-question distribution, one histogram per model."""
    fig = _figure(4.2 * len(columns), 3.2)
    axes = fig.subplots(1, len(columns), squeeze=False)[0]
    models = list(dict.fromkeys(questions["model"]))
    for ax, col in zip(axes, columns):
        values = questions[col].to_numpy(float)
        finite = values[np.isfinite(values)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        bins = np.linspace(lo, hi if hi > lo else lo + 1e-6, 16)
        for model in models:
            v = questions.loc[questions["model"] == model, col].to_numpy(float)
            v = v[np.isfinite(v)]
            ax.hist(v, bins=bins, alpha=0.6 if len(models) > 1 else 0.9, label=f"{model} (n={v.size})")
        ax.set_xlabel((labels or {}).get(col, col))
        ax.set_ylabel("questions")
        ax.legend(fontsize=7)
    return to_base64(fig)


def means_with_ci(rows: list[dict], title: str) -> str:
    """Horizontal error bars: rows of {label, mean, low, high}."""
    fig = _figure(6.5, 0.35 * len(rows) + 1.2)
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    means = np.array([r["mean"] for r in rows], float)
    err = np.array([[r["mean"] - r["low"], r["high"] - r["mean"]] for r in rows], float).T
    ax.errorbar(means, y, xerr=np.nan_to_num(err), fmt="o", capsize=3)
    ax.set_yticks(y, [r["label"] for r in rows], fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return to_base64(fig)


def correlation_bars(records: list[dict], method: str) -> str:
    """Correlation with human judgments per metric with 95% CI error bars."""
    recs = [r for r in records if r["method"] == method]
    fig = _figure(max(4.0, 0.7 * len(recs) + 1.5), 3.4)
    ax = fig.subplots()
    x = np.arange(len(recs))
    r = np.array([v["r"] for v in recs], float)
    err = np.array([[v["r"] - v["ci95_low"], v["ci95_high"] - v["r"]] for v in recs], float).T
    ax.bar(x, np.nan_to_num(r), yerr=np.nan_to_num(err), capsize=3, color="#4c72b0")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, [v["metric"] for v in recs], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(f"{method} correlation with human")
    ax.set_ylim(-1, 1)
    return to_base64(fig)
