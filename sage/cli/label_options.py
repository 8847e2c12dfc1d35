"""The options that say how a labels file is read, shared by `sage annotate import`, `sage annotate
agreement` and `sage correlate`, and the one reader they all call."""
from __future__ import annotations

from pathlib import Path

import click

LABEL_OPTION_NAMES = ("pairs", "responses", "scheme", "annotator_columns", "ignore_unknown", "kind", "model")


def split_names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def label_import_options(*, pairs_help: str, responses_help: str):
    """Decorator: how labels are read and matched to pairs (`read_labels_file` reads them)."""
    opts = [
        click.option("--pairs", type=click.Path(path_type=Path), default=None, help=pairs_help),
        click.option("--responses", type=click.Path(path_type=Path), default=None, help=responses_help),
        click.option("--scheme", type=click.Choice(["auto", "nli", "binary"]), default="auto", show_default=True),
        click.option("--annotator-columns", default=None, help="Comma-separated annotator columns of a wide CSV."),
        click.option("--ignore-unknown", is_flag=True,
                     help="Skip and count label rows that match no pair (unknown id, changed hash, texts not found)."),
        click.option("--kind", type=click.Choice(["answer", "rot"]), default="answer", show_default=True,
                     help="Pair kind: which labelled pairs count, and which texts rows without pair ids are "
                          "matched against."),
        click.option("--model", default=None, help="Restrict text matching to this model."),
    ]

    def deco(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return deco


def read_labels_file(labels: Path, options: dict, *, pair_table=None, responses_table=None):
    """`read_labels` with the command's label options; the pairs and responses tables are read from
    --pairs / --responses unless the caller already has them."""
    from sage.annotation.importer import read_labels, read_pairs
    from sage.data.responses import read_responses

    if pair_table is None and options["pairs"]:
        pair_table = read_pairs(options["pairs"])
    if responses_table is None and options["responses"]:
        responses_table = read_responses(options["responses"])
    scheme = options["scheme"]
    return read_labels(labels, pair_table, responses_table, None if scheme == "auto" else scheme,
                       split_names(options["annotator_columns"]) or None, options["ignore_unknown"],
                       options["kind"], options["model"])
