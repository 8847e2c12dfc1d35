"""`sage edit`: run CounterMoral editing methods and write per-entry JSON lines, summaries, tables."""
from __future__ import annotations

import logging
from pathlib import Path

import click

from sage.cli.editing_options import (
    FRAMEWORKS,
    check_sequential_options,
    editing_options,
    parse_methods,
    read_hparams,
    sequential_options,
    warn_deprecated,
)
from sage.cli.options import pop_executor, quiet_model_loading
from sage.editing.editor_base import EDITORS
from sage.data.run_dir import claim_run_dir
from sage.editing.dataset import default_data_dir
from sage.editing.runner import RunConfig, check_data, sequential_context
from sage.editing.sequential import SequentialConfig, run_sequential
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
@sequential_options("Edit after edit on one model, never restored in between, over the chosen frameworks' entries in "
                    "a seeded order; measured after each edit and, for every edit so far, at --checkpoints.",
                    "every edit so far is measured and the state saved")
@click.option("--order-seed", type=int, default=None, help="--sequential: seed of the edit order (default: --seed).")
def command(methods, frameworks, batch, sequential, checkpoints, drift_texts, order_seed, hparams_file, out_dir,
            data_dir, **options):
    """Edit moral judgments (CounterMoral) and score reliability, generalization and neighbourhood.

    With --executor ray, the (method, framework, entry) units of the sweep run on a Ray cluster.
    With --sequential, each method edits the entries one after another on one model (in this process)."""
    quiet_model_loading()
    executor_name, executor_opts = pop_executor(options)
    log = logging.getLogger("sage.cli.edit")
    if batch:
        warn_deprecated("--batch", "--method NAME:batch")
    choices = parse_methods(list(methods) or EDITORS.names(), all_batch=batch)  # unknown names fail here
    marks = check_sequential_options(choices, sequential, checkpoints, order_seed, executor_name, drift_texts)
    frameworks = list(frameworks) or list(FRAMEWORKS)
    overrides = read_hparams(hparams_file, [c.name for c in choices])
    data = Path(data_dir) if data_dir else default_data_dir()
    # Every file the run reads, and the model's name, are checked before anything loads or is
    # written: one clear line, exit status 2.
    check_data(data, [(c.name, c.batch) for c in choices], frameworks, options["subset"], options["limit"])
    resolve_model_path(options["model"], what="generator model", download=False)
    with claim_run_dir(out_dir, inputs={"--hparams": hparams_file}, outputs=["tables.md"]):
        device = options["device"]
        cfgs = [RunConfig(method=c.name, frameworks=frameworks, subset=options["subset"], model=options["model"],
                          out=Path(out_dir), data=str(data), limit=options["limit"], batch=c.batch,
                          overrides=overrides.get(c.name, {}), corpus=options["corpus"],
                          device=device or default_device(), seed=options["seed"],
                          dtype=resolve_dtype(options["dtype"], device or default_device()),
                          device_map=options["device_map"])
                for c in choices]
        if sequential:
            for cfg in cfgs:  # the other subset's files a retrieval or trained method reads, checked before any load
                sequential_context(cfg.data, cfg.subset, method=cfg.method)
            for cfg in cfgs:
                summary = run_sequential(SequentialConfig(cfg, checkpoints=marks, order_seed=order_seed,
                                                          drift_texts=drift_texts or SequentialConfig.drift_texts))
                last = summary["checkpoints"][-1] if summary["checkpoints"] else {}
                log.info("%s sequential: %d edits, retention %.3f", cfg.method, summary["n_edits"],
                         last.get("retention", float("nan")))
            click.echo(f"wrote {write_tables(Path(out_dir), data)}")
            return
        with make_executor(executor_name, executor_opts) as executor:
            # Workers resolve the device themselves unless --device says (a CPU driver, GPU workers).
            summaries = run_sweep(cfgs, executor, device=device)
        for c, summary in zip(choices, summaries):
            rel = summary["overall"].get("reliability", {}).get("mean", float("nan"))
            log.info("%s: %d entries, reliability %.3f", c.spelled, summary["n_entries"], rel)
        path = write_tables(Path(out_dir), data)
        click.echo(f"wrote {path}")
