"""A scoring run's result: the per-question table, the summary (means with bootstrap CIs, counts,
provenance) and its Markdown, and writing them."""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from sage.data.files import write_table
from sage.data.responses import write_responses
from sage.metrics.question_metrics import (
    QUESTION_METRICS,
)
from sage.metrics.stats import bootstrap_mean_ci
from sage.outputs import write_text
from sage.provenance import provenance

log = logging.getLogger(__name__)

@dataclass
class ScoreResult:
    questions: pd.DataFrame
    summary: dict
    responses: pd.DataFrame | None = None  # the rows that were scored (canonical columns)
    edges: pd.DataFrame | None = None  # one row per pair: every similarity, directional NLI/judge values

    def metric_columns(self) -> list[str]:
        skip = {"model", "question_id", "question", "n"}
        return [c for c in self.questions.columns if c not in skip]

    def write(self, out_dir: str | Path, table_format: str = "csv") -> Path:
        """questions, summary.json, summary.md, and responses and edges when held in memory (a run
        scored with `out_dir` streamed those there already)."""

        out = Path(out_dir)
        write_table(self.questions, out / f"questions.{table_format}")
        write_text(out / "summary.json", json.dumps(self.summary, indent=2, default=str) + "\n")
        write_text(out / "summary.md", summary_markdown(self.summary))
        if self.responses is not None:
            write_responses(self.responses, out / f"responses.{table_format}")
        if self.edges is not None:
            write_table(self.edges, out / f"edges.{table_format}")
        return out


def headline_columns(summary: dict) -> list[tuple[str, str]]:
    """(column, label) pairs for the summary table: per text column, each metric in the chosen order."""
    cfg = summary["config"]
    return [pair for col in cfg["on"] for m in cfg["metrics"] for pair in QUESTION_METRICS.get(m)().headline(cfg, col)]


def summary_markdown(summary: dict) -> str:
    cols = headline_columns(summary)
    lines = [
        "# SaGE consistency summary",
        "",
        "Mean over questions with a 95% bootstrap CI "
        f"({summary['config']['n_boot']} resamples, seed {summary['config']['seed']}). "
        f"SGE edges: {', '.join(summary['config']['sge_edges'])}.",
        "",
        "| Model | Questions | " + " | ".join(label for _, label in cols) + " |",
        "|---|---:|" + "---:|" * len(cols),
    ]
    for model, m in summary["models"].items():
        cells = []
        for c, _ in cols:
            s = m["metrics"].get(c)
            cells.append("n/a" if not s or s["n"] == 0 else f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]")
        lines.append(f"| {model} | {m['n_questions_scored']} | " + " | ".join(cells) + " |")
    if summary.get("warnings"):
        lines += [""] + [f"Warning: {w}" for w in summary["warnings"]]
    lines += ["", "Counts: " + "; ".join(
        f"{model}: {m['n_rows']} rows, {m['n_questions']} questions, {m['n_undefined']} undefined (fewer than two answers), "
        f"{m['n_skipped_rows']} rows skipped" for model, m in summary["models"].items()), ""]
    if summary.get("undefined_questions"):
        lines += ["Undefined questions (fewer than two answers; excluded from the means): " + ", ".join(
            f"{u['question_id']} ({u['model']})" for u in summary["undefined_questions"]), ""]
    lines.append(f"Provenance: sage {summary['provenance']['versions'].get('sage-consistency', '?')}, "
                 f"git {summary['provenance']['git']}, created {summary['provenance']['created']}.")
    return "\n".join(lines) + "\n"




def summarize(questions, index, config, on, skipped, source, timings) -> dict:
    metric_cols = [c for c in questions.columns if c not in ("model", "question_id", "question", "n")]
    skipped_by_model = index.skipped_per_model
    models = {}
    for model, q in questions.groupby("model", sort=False):
        defined = q["n"] >= 2
        models[model] = {
            "n_rows": int(index.rows_per_model.get(model, 0)),
            "n_questions": int(len(q)),
            "n_undefined": int((~defined).sum()),
            "n_questions_scored": int(defined.sum()),
            "n_skipped_rows": int(skipped_by_model.get(model, 0)),
            "metrics": {
                c: bootstrap_mean_ci(q.loc[defined, c].to_numpy(), n_boot=config.n_boot, seed=config.seed).as_dict()
                for c in metric_cols
            },
        }
    cfg = asdict(config)
    cfg["on"] = list(on)
    return {
        "source": source,
        "config": cfg,
        "models": models,
        "skipped_rows": skipped,
        "undefined_questions": [
            {"model": m, "question_id": q} for m, q in questions.loc[questions["n"] < 2, ["model", "question_id"]].itertuples(index=False)
        ],
        "timings_seconds": timings,
        "provenance": provenance(config.seed),
    }
