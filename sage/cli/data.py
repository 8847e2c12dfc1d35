"""`sage data list|download`: the public datasets the method uses, pinned and verified."""
from __future__ import annotations

from pathlib import Path

import click

from sage.cli.options import progress_option
from sage.data.catalog import DATASETS, QUESTION_SETS
from sage.data.download import dataset_dir, download_dataset, local_dataset
from sage.errors import SageInputError


@click.group("data")
def command():
    """Public datasets (CounterMoral, the SaGE authors' questions and responses): list and download."""


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


@command.command("list")
def list_cmd():
    """Datasets (size, pinned source, local copy) and the question sets `sage score --questions` takes."""

    click.echo("Datasets (`sage data download NAME`):")
    for name in DATASETS.names():
        ds = DATASETS.get(name)
        here = local_dataset(name)
        click.echo(f"  {name:<18} {len(ds.files):>3} files {_human(ds.size):>9}  {ds.owner}/{ds.repo}@{ds.commit[:10]}")
        click.echo(f"  {'':<18} {ds.description}")
        click.echo(f"  {'':<18} {'downloaded: ' + str(here) if here else 'not downloaded (' + str(dataset_dir(name)) + ')'}")
    click.echo("Question sets (`sage score --questions NAME`; downloaded on first use):")
    for name in QUESTION_SETS.names():
        qs = QUESTION_SETS.get(name)
        click.echo(f"  {name:<24} {qs.dataset}/{qs.file}: {qs.description}")


@command.command("download")
@click.argument("names", nargs=-1, required=True)
@click.option("--to", "to", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory to put the files in (one dataset only; default: $SAGE_CACHE_DIR/data/NAME).")
@progress_option
def download_cmd(names, to, no_progress):
    """Download datasets by name, verify every file's sha256, and print where they are."""

    if to is not None and len(names) > 1:
        raise SageInputError("--to takes one dataset; download the others without --to or one at a time")
    for name in names:
        DATASETS.get(name)  # unknown names fail before anything downloads
    for name in names:
        path = download_dataset(name, to=to, progress=not no_progress)
        click.echo(f"{name}: {path}")
