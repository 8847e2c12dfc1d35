"""`sage annotate`: export answer pairs for human judgment, import labels, measure agreement."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from sage.annotation.agreement import agreement, agreement_markdown
from sage.annotation.export import predictions_from_similarity, write_exports
from sage.cli.label_options import label_import_options, read_labels_file, split_names
from sage.data.files import write_csv
from sage.data.run_dir import check_inputs_kept
from sage.errors import SageInputError
from sage.metrics.similarity import build_similarity
from sage.outputs import write_text, write_whole

log = logging.getLogger(__name__)


@click.group("annotate")
def command() -> None:
    """Human-judgment loop: export pairs, import labels, inter-annotator agreement."""


@command.command("export")
@click.argument("responses", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Output directory.")
@click.option("--format", "formats", multiple=True, type=click.Choice(["csv", "jsonl", "labelstudio"]),
              help="Formats to write (repeatable; default all three).")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["answer", "rot"]),
              help="Pair kinds (repeatable; default answer).")
@click.option("--max-pairs", type=int, default=None, help="Seeded sample of at most N pairs per question (default all C(n,2)).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the pair sample (recorded in export_meta.json).")
@click.option("--scheme", type=click.Choice(["nli", "binary"]), default="nli", show_default=True,
              help="Label scheme of the pre-annotations (both labeling configs are written).")
@click.option("--annotators", default="", help="Comma-separated annotator names: blank columns in pairs.csv.")
@click.option("--predictions", "predictions_path", type=click.Path(path_type=Path), default=None,
              help="CSV with pair_id,label[,score] to pre-annotate Label Studio tasks.")
@click.option("--predict", "predict_with", default=None,
              help="Pre-annotate with a toolkit similarity (e.g. cosine): >= --high entailment, < --low contradiction.")
@click.option("--model-name", default=None,
              help="Model label when the table has no 'model' column (default: file stem, as 'sage score' does).")
@click.option("--high", type=float, default=0.8, show_default=True)
@click.option("--low", type=float, default=0.5, show_default=True)
def export_cmd(responses, out_dir, formats, kinds, seed, scheme, **options):
    """Write the answer (and RoT) pairs of each question for annotation."""
    from sage.annotation.importer import read_label_table
    from sage.annotation.pairs import build_pairs
    from sage.data.responses import read_responses

    model_name, predictions_path, predict_with = options["model_name"], options["predictions_path"], options["predict_with"]
    high, low = options["high"], options["low"]
    df = read_responses(responses)
    if model_name:
        df["model"] = model_name
    elif (df["model"] == "model").all():  # same default label as `sage score`, so ids match its run
        df["model"] = Path(responses).stem
    pair_set = build_pairs(df, tuple(kinds) or ("answer",), options["max_pairs"], seed, str(responses))
    predictions = None
    if predictions_path and predict_with:
        raise SageInputError("give --predictions or --predict, not both")
    if predictions_path:
        predictions = read_label_table(predictions_path)
        for col in ("pair_id", "label"):
            if col not in predictions.columns:
                raise SageInputError(f"{predictions_path}: missing column {col!r}; need pair_id,label[,score]")
        unknown = sorted(set(predictions["pair_id"]) - set(pair_set.pairs["pair_id"]))
        if unknown:
            raise SageInputError(f"{predictions_path}: {len(unknown)} unknown pair ids (first {unknown[0]!r}); "
                                 f"predict on this export's pairs")
        if "score" in predictions.columns:
            predictions["score"] = predictions["score"].astype(float)
    elif predict_with:

        predictions = predictions_from_similarity(pair_set.pairs, build_similarity(predict_with), scheme, high, low)
    meta = {"responses": str(responses), "kinds": list(kinds) or ["answer"],
            "predict": predict_with, "thresholds": {"high": high, "low": low} if predict_with else None}
    written = write_exports(pair_set, out_dir, tuple(formats) or ("csv", "jsonl", "labelstudio"), scheme,
                            tuple(split_names(options["annotators"])), predictions, meta)
    c = pair_set.counts
    click.echo(f"{c['pairs']} pairs ({c['pairs_possible']} possible) from {c['groups']} questions; "
               f"{c['blank_texts']} blank texts left out; seed {seed}")
    for name, path in written.items():
        click.echo(f"  {name}: {path}")


_PAIRS_HELP = "pairs.csv/pairs.jsonl from the export: checks pair ids and content hashes."
_RESPONSES_HELP = "Responses table to match rows without pair ids by their texts."


@command.command("import")
@click.argument("labels", type=click.Path(path_type=Path))
@label_import_options(pairs_help=_PAIRS_HELP, responses_help=_RESPONSES_HELP)
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Normalised labels CSV (pair_id, annotator, label); a .report.json is written beside it.")
def import_cmd(labels, out, **options):
    """Read Label Studio JSON, wide CSV (one column per annotator) or JSONL labels."""
    _keep_inputs(out, labels, options)
    ls = read_labels_file(labels, options)
    table = ls.labels[["pair_id", "annotator", "label"]]
    if len(ls.pairs.columns) > 1:
        table = table.merge(ls.pairs, on="pair_id", how="left")
    write_whole(out, lambda tmp: write_csv(table, tmp))  # any name the user gives
    report = {"source": str(labels), "scheme": ls.scheme, "annotators": ls.annotators, "counts": ls.counts}
    rpath = out.with_suffix(".report.json")
    write_text(rpath, json.dumps(report, indent=2, default=str))
    c = ls.counts
    click.echo(f"{c['labels']} {ls.scheme} labels from {len(ls.annotators)} annotators on {c['pairs_labelled']} pairs; "
               f"skipped cells {sum(c['skipped_by_annotator'].values())}, cancelled {c.get('cancelled', 0)}, "
               f"duplicates collapsed {c.get('duplicates_collapsed', 0)}, unmatched rows skipped "
               f"{c['unmatched']['rows']}, unlabelled pairs {c.get('pairs_seen_without_any_label', 0)}")
    _echo_unmatched(c)
    click.echo(f"  labels: {out}\n  report: {rpath}")


def _keep_inputs(out: Path, labels: Path, options: dict) -> None:
    """--out and the file written beside it must not overwrite the labels, pairs or responses read."""
    check_inputs_kept(out.parent, {"LABELS": labels, "--pairs": options.get("pairs"),
                                   "--responses": options.get("responses")},
                      [out.name, out.with_suffix(".report.json").name, out.with_suffix(".md").name])


def _echo_unmatched(counts) -> None:
    from sage.annotation.importer import unmatched_note

    note = unmatched_note(counts)
    if note:
        click.echo(f"skipped {note}")


@command.command("agreement")
@click.argument("labels", type=click.Path(path_type=Path))
@label_import_options(pairs_help=_PAIRS_HELP, responses_help=_RESPONSES_HELP)
@click.option("--n-boot", type=int, default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="JSON output (a .md is written beside it).")
def agreement_cmd(labels, n_boot, seed, out, **options):
    """Fleiss' kappa, Krippendorff's alpha, label distributions, bootstrap 95% CIs."""

    if out:
        _keep_inputs(out, labels, options)
    ls = read_labels_file(labels, options)
    result = agreement(ls.labels, ls.scheme, n_boot, seed)
    result["import_counts"] = ls.counts
    md = agreement_markdown(result)
    if out:
        write_text(out, json.dumps(result, indent=2, default=str))
        write_text(out.with_suffix(".md"), md)
    click.echo(md)
    _echo_unmatched(ls.counts)
