"""`sage correlate`: per-question human consistency against every metric column of a run."""
from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import click

from sage.annotation.correlation import (
    CorrelationSettings,
    correlation_markdown,
    metric_columns,
    read_question_scores,
    run_correlation,
)
from sage.annotation.validity import read_edges, run_validity, validity_markdown
from sage.cli.label_options import label_import_options, read_labels_file
from sage.data.files import write_json
from sage.errors import SageInputError
from sage.metrics.question_metrics import measure_edges
from sage.outputs import write_text

log = logging.getLogger(__name__)


@click.command("correlate")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--labels", "labels_path", required=True, type=click.Path(path_type=Path),
              help="Labels: Label Studio JSON, wide/long CSV or JSONL (as 'sage annotate import' reads).")
@label_import_options(
    pairs_help="pairs.csv/jsonl of the export (default: all pairs rebuilt from RUN_DIR/responses.csv).",
    responses_help="Responses table for ids and text matching (default RUN_DIR/responses.csv).")
@click.option("--definition", type=click.Choice(["entail", "not-contradict", "graded"]), default="entail",
              show_default=True, help="Which NLI labels count as consistent (see sage.annotation.correlation).")
@click.option("--aggregate", type=click.Choice(["mean", "majority"]), default="mean", show_default=True,
              help="Per pair: mean over annotators or the majority label.")
@click.option("--metric", "metrics", multiple=True, help="Metric columns or glob patterns (default: sge_*, baselines).")
@click.option("--method", "methods", multiple=True, type=click.Choice(["spearman", "kendall", "pearson"]),
              help="Correlation methods (default all three).")
@click.option("--compare", "compares", multiple=True,
              help="METRIC_A:METRIC_B for a paired bootstrap test (default: SGE against each baseline).")
@click.option("--primary", type=click.Choice(["spearman", "kendall", "pearson"]), default="spearman",
              show_default=True, help="Method of the paired tests.")
@click.option("--min-pairs", type=int, default=1, show_default=True, help="Least labelled pairs per question.")
@click.option("--n-boot", type=int, default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Output directory (default RUN_DIR/correlation).")
def command(run_dir, labels_path, out_dir, **options):
    """Spearman/Kendall/Pearson of human consistency with each metric, bootstrap CIs, paired tests."""
    from sage.annotation.importer import read_pairs, unmatched_note
    from sage.annotation.pairs import build_pairs
    from sage.data.responses import read_responses

    questions_path = run_dir / "questions.csv"
    if not questions_path.is_file():
        raise SageInputError(f"{run_dir}: no questions.csv; pass a run directory written by 'sage score'")
    questions = read_question_scores(questions_path)
    pairs = options["pairs"]
    responses_path = options["responses"] or (run_dir / "responses.csv")
    resp = read_responses(responses_path) if Path(responses_path).is_file() else None
    if pairs:
        pair_df = read_pairs(pairs)
    elif resp is not None:
        kinds = ("answer", "rot") if "rot" in resp.columns else ("answer",)
        pair_df = build_pairs(resp, kinds, source=str(responses_path)).pairs
    else:
        pair_df = None
    ls = read_labels_file(labels_path, options, pair_table=pair_df, responses_table=resp)
    meta = pair_df if pair_df is not None else ls.pairs
    comparisons = None
    if options["compares"]:
        comparisons = []
        for c in options["compares"]:
            a, sep, b = c.partition(":")
            if not sep or not a or not b:
                raise SageInputError(f"--compare {c!r}: write METRIC_A:METRIC_B, e.g. sge_answer:bleu_answer")
            comparisons.append((a, b))
    settings = CorrelationSettings(
        definition=options["definition"], aggregate=options["aggregate"], kind=options["kind"],
        metrics=tuple(metric_columns(questions, tuple(options["metrics"]))) if options["metrics"] else None,
        methods=tuple(options["methods"]) or CorrelationSettings.methods, n_boot=options["n_boot"],
        seed=options["seed"], min_pairs=options["min_pairs"],
        comparisons=tuple(comparisons) if comparisons is not None else None, primary=options["primary"])
    result = run_correlation(ls.labels, meta, questions, settings)
    result.update({"run_dir": str(run_dir), "labels": str(labels_path), "scheme": ls.scheme,
                   "skipped_label_rows": ls.counts["unmatched"], "import_counts": ls.counts})
    settings = replace(settings, metrics=tuple(result["metrics"]))  # the columns the correlations used
    result["validity"] = _validity(run_dir, ls.labels, meta, questions, result, settings)
    out_dir = out_dir or (run_dir / "correlation")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "correlation.json", result)  # strict JSON: undefined values are null

    md = correlation_markdown(result) + validity_markdown(result["validity"])
    note = unmatched_note(ls.counts)
    if note:
        md += f"\nSkipped (--ignore-unknown): {note}.\n"
    write_text(out_dir / "correlation.md", md)
    click.echo(md)
    for warning in result["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"written: {out_dir / 'correlation.json'}, {out_dir / 'correlation.md'}")


def _validity(run_dir, labels, meta, questions, result, settings):
    """Pair-level validity (from RUN_DIR/edges.csv), redundancy and ranking tables; the run's
    summary.json says which edge similarity each measure is computed from."""
    import pandas as pd


    edges_path = run_dir / "edges.csv"
    edges = read_edges(edges_path) if edges_path.is_file() else None
    summary_path = run_dir / "summary.json"
    try:
        cfg = json.loads(summary_path.read_text(encoding="utf-8")).get("config", {}) if summary_path.is_file() else {}
        sources = measure_edges(cfg)
    except (ValueError, KeyError, TypeError, AttributeError, SageInputError) as exc:  # an older or edited summary
        log.warning("%s: cannot tell which edge each measure uses (%s); edge AUROCs left out", summary_path, exc)
        sources = {}
    return run_validity(labels, meta, questions, pd.DataFrame(result["human"]), edges, settings, sources)

