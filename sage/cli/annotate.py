"""`sage annotate`: export answer pairs for human judgment, import labels, measure agreement."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import click

log = logging.getLogger(__name__)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


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
def export_cmd(responses, out_dir, formats, kinds, max_pairs, seed, scheme, annotators, predictions_path,
               predict_with, model_name, high, low):
    """Write the answer (and RoT) pairs of each question for annotation."""
    from sage.annotation.export import predictions_from_similarity, write_exports
    from sage.annotation.importer import read_table
    from sage.annotation.pairs import build_pairs
    from sage.data.responses import read_responses
    from sage.errors import SageInputError

    df = read_responses(responses)
    if model_name:
        df["model"] = model_name
    elif (df["model"] == "model").all():  # same default label as `sage score`, so ids match its run
        df["model"] = Path(responses).stem
    pair_set = build_pairs(df, tuple(kinds) or ("answer",), max_pairs, seed, str(responses))
    predictions = None
    if predictions_path and predict_with:
        raise SageInputError("give --predictions or --predict, not both")
    if predictions_path:
        predictions = read_table(predictions_path)
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
        from sage.metrics.similarity import build_similarity

        predictions = predictions_from_similarity(pair_set.pairs, build_similarity(predict_with), scheme, high, low)
    meta = {"responses": str(responses), "kinds": list(kinds) or ["answer"],
            "predict": predict_with, "thresholds": {"high": high, "low": low} if predict_with else None}
    written = write_exports(pair_set, out_dir, tuple(formats) or ("csv", "jsonl", "labelstudio"), scheme,
                            tuple(_split(annotators)), predictions, meta)
    c = pair_set.counts
    click.echo(f"{c['pairs']} pairs ({c['pairs_possible']} possible) from {c['groups']} questions; "
               f"{c['blank_texts']} blank texts left out; seed {seed}")
    for name, path in written.items():
        click.echo(f"  {name}: {path}")


def _load(labels, pairs, responses, scheme, annotator_columns, ignore_unknown, kind, model):
    from sage.annotation.importer import read_labels, read_pairs

    pair_df = read_pairs(pairs) if pairs else None
    resp = None
    if responses:
        from sage.data.responses import read_responses

        resp = read_responses(responses)
    return read_labels(labels, pair_df, resp, None if scheme == "auto" else scheme, _split(annotator_columns) or None,
                       ignore_unknown, kind, model)


_import_options = [
    click.option("--pairs", type=click.Path(path_type=Path), default=None,
                 help="pairs.csv/pairs.jsonl from the export: checks pair ids and content hashes."),
    click.option("--responses", type=click.Path(path_type=Path), default=None,
                 help="Responses table to match rows without pair ids by their texts."),
    click.option("--scheme", type=click.Choice(["auto", "nli", "binary"]), default="auto", show_default=True),
    click.option("--annotator-columns", default=None, help="Comma-separated annotator columns of a wide CSV."),
    click.option("--ignore-unknown", is_flag=True,
                 help="Skip and count label rows that match no pair (unknown id, changed hash, texts not found)."),
    click.option("--kind", type=click.Choice(["answer", "rot"]), default="answer", show_default=True,
                 help="Which texts rows without pair ids are matched against."),
    click.option("--model", default=None, help="Restrict text matching to this model."),
]


def _with_import_options(fn):
    for opt in reversed(_import_options):
        fn = opt(fn)
    return fn


@command.command("import")
@click.argument("labels", type=click.Path(path_type=Path))
@_with_import_options
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Normalised labels CSV (pair_id, annotator, label); a .report.json is written beside it.")
def import_cmd(labels, pairs, responses, scheme, annotator_columns, ignore_unknown, kind, model, out):
    """Read Label Studio JSON, wide CSV (one column per annotator) or JSONL labels."""
    ls = _load(labels, pairs, responses, scheme, annotator_columns, ignore_unknown, kind, model)
    out.parent.mkdir(parents=True, exist_ok=True)
    table = ls.labels[["pair_id", "annotator", "label"]]
    if len(ls.pairs.columns) > 1:
        table = table.merge(ls.pairs, on="pair_id", how="left")
    table.to_csv(out, index=False)
    report = {"source": str(labels), "scheme": ls.scheme, "annotators": ls.annotators, "counts": ls.counts}
    rpath = out.with_suffix(".report.json")
    rpath.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    c = ls.counts
    click.echo(f"{c['labels']} {ls.scheme} labels from {len(ls.annotators)} annotators on {c['pairs_labelled']} pairs; "
               f"skipped cells {sum(c['skipped_by_annotator'].values())}, cancelled {c.get('cancelled', 0)}, "
               f"duplicates collapsed {c.get('duplicates_collapsed', 0)}, unmatched rows skipped "
               f"{c['unmatched']['rows']}, unlabelled pairs {c.get('pairs_seen_without_any_label', 0)}")
    _echo_unmatched(c)
    click.echo(f"  labels: {out}\n  report: {rpath}")


def _echo_unmatched(counts) -> None:
    from sage.annotation.importer import unmatched_note

    note = unmatched_note(counts)
    if note:
        click.echo(f"skipped {note}")


@command.command("agreement")
@click.argument("labels", type=click.Path(path_type=Path))
@_with_import_options
@click.option("--n-boot", type=int, default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="JSON output (a .md is written beside it).")
def agreement_cmd(labels, pairs, responses, scheme, annotator_columns, ignore_unknown, kind, model, n_boot, seed, out):
    """Fleiss' kappa, Krippendorff's alpha, label distributions, bootstrap 95% CIs."""
    from sage.annotation.agreement import agreement, agreement_markdown

    ls = _load(labels, pairs, responses, scheme, annotator_columns, ignore_unknown, kind, model)
    result = agreement(ls.labels, ls.scheme, n_boot, seed)
    result["import_counts"] = ls.counts
    md = agreement_markdown(result)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
        out.with_suffix(".md").write_text(md, encoding="utf-8")
    click.echo(md)
    _echo_unmatched(ls.counts)
