"""The options `sage edit` and `sage study edit-consistency` share, defined once, with one word per idea:
`--method NAME` or `NAME:batch` (all chosen entries in one edit), and `--hparams FILE` holding
`{"method": {overrides}}`.

Old spellings keep working for one release, with a warning: `sage edit --batch` (every method in batch
mode) and an `--hparams` file that is a plain object of one method's overrides.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from sage.cli.options import executor_options, precision_options, progress_option
from sage.editing.editor_base import EDITORS, check_batch_mode, check_sequential
from sage.editing.dataset import FRAMEWORKS, SUBSETS
from sage.errors import SageInputError

BATCH_MODE = "batch"
DEPRECATED_IN = "0.3"


def editing_options(*, default_out: str, method_help: str):
    """Decorator: the shared options of the editing commands (each command adds its own)."""
    def deco(f):
        opts = [
            click.option("--method", "methods", multiple=True,
                         help=f"{method_help} NAME:batch applies all chosen entries of a framework in one edit "
                              "(methods that batch)."),
            click.option("--framework", "frameworks", multiple=True, type=click.Choice(FRAMEWORKS),
                         help="Ethical framework (repeatable); default: all four."),
            click.option("--subset", type=click.Choice(list(SUBSETS)), default="broad", show_default=True),
            click.option("--limit", type=click.IntRange(min=1), default=None, help="First N entries per framework."),
            click.option("--model", default="smollm2-135m", show_default=True,
                         help="Model alias, path or Hugging Face id (downloaded once unless --offline)."),
            click.option("--out", "out_dir", default=default_out, show_default=True, type=click.Path()),
            click.option("--data", "data_dir", default=None, type=click.Path(),
                         help="CounterMoral directory (default: the copy `sage data download countermoral` keeps "
                              "in the sage cache, downloaded on first use when online)."),
            click.option("--hparams", "hparams_file", default=None, type=click.Path(),
                         help='JSON file {"METHOD": {overrides}} of hyperparameter overrides per method.'),
            click.option("--corpus", default=None, type=click.Path(),
                         help="Text or JSONL file for key statistics (default: the SaGE authors' Vicuna-7B "
                              "responses, dataset sage-responses, downloaded on first use when online; else "
                              "text the model generates, with a warning)."),
            click.option("--device", default=None, help="torch device (default: SAGE_DEVICE or cuda if available)."),
            click.option("--seed", default=0, show_default=True, type=int),
        ]
        for opt in reversed(opts):
            f = opt(f)
        return executor_options(progress_option(precision_options(f)))

    return deco


def sequential_options(what: str, checkpoints_mean: str):
    """Decorator: `--sequential` and `--checkpoints`, shared by `sage edit` and the study (`what`: what a
    sequential run does; `checkpoints_mean`: what happens at a checkpoint)."""
    def deco(f):
        f = click.option("--drift-texts", type=int, default=None,
                         help="--sequential: held-out texts the drift perplexity is measured on at each checkpoint "
                              "(default 64; fewer make quicker checkpoints and a noisier perplexity).")(f)
        f = click.option("--checkpoints", default=None,
                         help=f"--sequential: numbers of edits at which {checkpoints_mean}, comma-separated "
                              "(default: 10,30,100,300,1000 below the sequence's length, and its end).")(f)
        return click.option("--sequential", is_flag=True, help=what)(f)

    return deco


@dataclass(frozen=True)
class MethodChoice:
    name: str
    batch: bool

    @property
    def spelled(self) -> str:
        return f"{self.name}:{BATCH_MODE}" if self.batch else self.name


def parse_methods(methods, *, all_batch: bool = False) -> list[MethodChoice]:
    """`NAME` / `NAME:batch` strings -> choices; unknown names and modes fail with one line."""

    out = []
    for spelled in methods:
        name, _, mode = spelled.partition(":")
        EDITORS.get(name)  # unknown name: one line listing the methods, before any model loads
        if mode not in ("", BATCH_MODE):
            raise SageInputError(f"{spelled!r}: the only method mode is ':{BATCH_MODE}' (e.g. memit:{BATCH_MODE})")
        check_batch_mode(name, all_batch or mode == BATCH_MODE)
        out.append(MethodChoice(name, all_batch or mode == BATCH_MODE))
    return out


def check_sequential_options(choices: list[MethodChoice], sequential: bool, checkpoints: str | None,
                             order_seed: int | None, executor: str,
                             drift_texts: int | None = None) -> tuple[int, ...] | None:
    """The checkpoints of a `--sequential` run (None: the defaults); one line for options that do not fit
    together, or a method that cannot edit sequentially, before anything loads."""
    if not sequential:
        if checkpoints is not None or order_seed is not None or drift_texts is not None:
            raise SageInputError("--checkpoints, --order-seed and --drift-texts belong to --sequential; "
                                 "add it or drop them")
        return None
    if drift_texts is not None and drift_texts < 1:
        raise SageInputError(f"--drift-texts must be >= 1 (got {drift_texts})")
    if any(c.batch for c in choices):
        raise SageInputError(f"--sequential edits one entry after another; drop ':{BATCH_MODE}' (and --batch)")
    if executor != "local":
        raise SageInputError("--sequential runs in this process (each edit builds on the last); drop --executor")
    for c in choices:
        check_sequential(c.name)
    if checkpoints is None:
        return None
    try:
        return tuple(int(x) for x in checkpoints.split(",") if x.strip())
    except ValueError:
        raise SageInputError(f"--checkpoints {checkpoints!r}: expected comma-separated numbers of edits, "
                             "e.g. 10,30,100") from None


def warn_deprecated(old: str, new: str) -> None:
    click.echo(f"warning: {old} is deprecated and will be removed in sage {DEPRECATED_IN}; use {new}", err=True)


def read_hparams(path: str | Path | None, methods: list[str]) -> dict[str, dict[str, Any]]:
    """`--hparams FILE` as {method: overrides}. A plain object of overrides (the old `sage edit` shape)
    is taken as the one method's, with a warning; with several methods it is refused."""
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SageInputError(f"{path}: hyperparameter file not found; pass an existing JSON file") from None
    except UnicodeDecodeError:
        raise SageInputError(f"{path}: not UTF-8 text; save the hyperparameter file as UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise SageInputError(f"{path}: malformed JSON ({exc}); fix the file") from None
    if not isinstance(data, dict):
        raise SageInputError(f'{path}: expected a JSON object {{"METHOD": {{overrides}}}}')
    names = set(methods)
    if data and not (set(data) & names) and all(not isinstance(v, dict) for v in data.values()):
        if len(names) != 1:
            raise SageInputError(f'{path}: a plain object of overrides needs exactly one --method; write '
                                 f'{{"METHOD": {{overrides}}}} for several')
        warn_deprecated("an --hparams file of plain overrides", f'{{"{next(iter(names))}": {{overrides}}}}')
        return {next(iter(names)): data}
    for name, overrides in data.items():
        if not isinstance(overrides, dict):
            raise SageInputError(f"{path}: field {name!r} must be an object of overrides for that method")
        if name not in names:
            raise SageInputError(f"{path}: hyperparameter overrides for {name!r}, which is not among the "
                                 f"methods ({', '.join(methods)})")
    return data
