"""`sage edit`: run CounterMoral editing methods and write per-entry JSON lines, summaries, tables."""
from __future__ import annotations

import logging
from pathlib import Path

import click

from sage.cli.editing_options import (
    FRAMEWORKS,
    editing_options,
    parse_methods,
    read_hparams,
    warn_deprecated,
)
from sage.cli.options import pop_executor, quiet_model_loading
from sage.editing.base import EDITORS
from sage.editing.dataset import default_data_dir
from sage.editing.runner import RunConfig, check_data
from sage.editing.sweep import run_sweep
from sage.editing.tables import write_tables
from sage.executors import make_executor
from sage.models.causal_lm import resolve_dtype
from sage.models.resolve import resolve_model_path
from sage.settings import default_device


@click.command("edit")
@editing_options(default_out="results/editing",
                 method_help="Editing method (repeatable); default: every registered method.")
@click.option("--batch", is_flag=True, hidden=True, help="Deprecated: use --method NAME:batch.")
def command(methods, frameworks, batch, hparams_file, out_dir, data_dir, **options):
    """Edit moral judgments (CounterMoral) and score reliability, generalization and neighbourhood.

    With --executor ray, the (method, framework, entry) units of the sweep run on a Ray cluster."""


    quiet_model_loading()
    executor_name, executor_opts = pop_executor(options)
    log = logging.getLogger("sage.cli.edit")
    if batch:
        warn_deprecated("--batch", "--method NAME:batch")
    choices = parse_methods(list(methods) or EDITORS.names(), all_batch=batch)  # unknown names fail here
    frameworks = list(frameworks) or list(FRAMEWORKS)
    overrides = read_hparams(hparams_file, [c.name for c in choices])
    data = Path(data_dir) if data_dir else default_data_dir()
    # Every file the run reads, and the model's name, are checked before anything loads or is
    # written: one clear line, exit status 2.
    check_data(data, [(c.name, c.batch) for c in choices], frameworks, options["subset"], options["limit"])
    resolve_model_path(options["model"], what="generator model", download=False)
    device = options["device"]
    cfgs = [RunConfig(method=c.name, frameworks=frameworks, subset=options["subset"], model=options["model"],
                      out=Path(out_dir), data=str(data), limit=options["limit"], batch=c.batch,
                      overrides=overrides.get(c.name, {}), corpus=options["corpus"],
                      device=device or default_device(), seed=options["seed"],
                      dtype=resolve_dtype(options["dtype"], device or default_device()),
                      device_map=options["device_map"])
            for c in choices]
    with make_executor(executor_name, executor_opts) as executor:
        # Workers resolve the device themselves unless --device says (a CPU driver, GPU workers).
        summaries = run_sweep(cfgs, executor, device=device)
    for c, summary in zip(choices, summaries):
        rel = summary["overall"].get("reliability", {}).get("mean", float("nan"))
        log.info("%s: %d entries, reliability %.3f", c.spelled, summary["n_entries"], rel)
    path = write_tables(Path(out_dir), data)
    click.echo(f"wrote {path}")
