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


def preset_option(*, help_suffix: str = ""):
    """`--preset NAME` (sage.presets): the preset's values become the defaults of the other options.

    The option is eager, so its callback runs before the other options are read and its values
    land in `ctx.default_map`; click uses an option's value from the command line first, then the
    default map, then the declared default, so explicit options override the preset.
    """
    def callback(ctx: click.Context, param: click.Parameter, value: str | None):
        if value is None:
            return None
        from sage.presets import PRESETS

        preset = PRESETS.get(value)  # unknown name: one line listing the presets, exit 2
        ctx.default_map = {**(ctx.default_map or {}), **preset.values}
        return value

    def names() -> str:
        from sage.presets import PRESETS

        return ", ".join(PRESETS.names())

    return click.option("--preset", default=None, is_eager=True, callback=callback,
                        help=f"Named settings ({names()}); options given explicitly override them.{help_suffix}")
