"""Option parsing helpers shared by subcommands."""
from __future__ import annotations

import click


def csv_list(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise click.BadParameter("expected a comma-separated list")
    return items


DTYPE_CHOICES = ("auto", "bfloat16", "float16", "float32")


def precision_options(f):
    """--dtype and --device-map for commands that load a causal LM."""
    f = click.option("--device-map", default=None,
                     help="'auto' spreads a model too large for one GPU over the available GPUs (accelerate).")(f)
    f = click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="auto", show_default=True,
                     help="Model weights' dtype: auto = bfloat16 on CUDA, float32 on CPU.")(f)
    return f
