"""`sage edit`: run CounterMoral editing methods and write per-entry JSON lines, summaries, tables."""
from __future__ import annotations

import click

from sage.cli.options import (
    executor_options,
    pop_executor,
    precision_options,
    progress_option,
)

_FRAMEWORKS = ("care_ethics", "deontology", "utilitarianism", "virtue_ethics")


@click.command("edit")
@click.option("--method", "methods", multiple=True,
              help="Editing method (repeatable); default: every registered method.")
@click.option("--framework", "frameworks", multiple=True, type=click.Choice(_FRAMEWORKS),
              help="Ethical framework (repeatable); default: all four.")
@click.option("--subset", type=click.Choice(["broad", "specific"]), default="broad", show_default=True)
@click.option("--model", default="smollm2-135m", show_default=True, help="Model alias, path or Hugging Face id (downloaded once unless --offline).")
@click.option("--out", "out_dir", default="results/editing", show_default=True, type=click.Path())
@click.option("--data", "data_dir", default=None, type=click.Path(),
              help="CounterMoral directory (default: the copy `sage data download countermoral` keeps in the "
                   "sage cache, downloaded on first use when online).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="First N entries per framework.")
@click.option("--batch", is_flag=True, help="Apply all entries of a subset at once (batch methods).")
@click.option("--hparams", "hparams_file", default=None, type=click.Path(),
              help="JSON file of hyperparameter overrides for the method.")
@click.option("--corpus", default=None, type=click.Path(),
              help="Text or JSONL file for key statistics (default: the SaGE authors' Vicuna-7B "
                   "responses, dataset sage-responses, downloaded on first use when online; else "
                   "text the model generates, with a warning).")
@click.option("--device", default=None, help="torch device (default: SAGE_DEVICE or cuda if available).")
@click.option("--seed", default=0, show_default=True, type=int)
@precision_options
@progress_option
@executor_options
def command(methods, frameworks, subset, model, out_dir, data_dir, limit, batch, hparams_file,
            corpus, device, seed, dtype, device_map, no_progress, **executor_kw):
    """Edit moral judgments (CounterMoral) and score reliability, generalization and neighbourhood.

    With --executor ray, the (method, framework, entry) units of the sweep run on a Ray cluster."""
    import logging
    from pathlib import Path

    from sage.editing.base import EDITORS, load_overrides
    from sage.editing.dataset import default_data_dir
    from sage.editing.runner import RunConfig, check_data
    from sage.editing.sharded import run_sweep
    from sage.editing.tables import write_tables
    from sage.executors import make_executor
    from sage.models.causal_lm import resolve_dtype
    from sage.models.resolve import resolve_model_path
    from sage.settings import default_device

    executor_name, executor_opts = pop_executor(executor_kw)
    log = logging.getLogger("sage.cli.edit")
    methods = list(methods) or EDITORS.names()
    for m in methods:
        EDITORS.get(m)  # unknown names fail before any model loads
    frameworks = list(frameworks) or list(_FRAMEWORKS)
    overrides = load_overrides(hparams_file)
    if overrides and len(methods) != 1:
        from sage.errors import SageInputError

        raise SageInputError("--hparams holds one method's hyperparameters; pass exactly one --method")
    data = Path(data_dir) if data_dir else default_data_dir()
    # Every file the run reads, and the model's name, are checked before anything loads or is
    # written: one clear line, exit status 2.
    check_data(data, [(m, batch) for m in methods], frameworks, subset, limit)
    resolve_model_path(model, what="generator model", download=False)
    cfgs = [RunConfig(method=m, frameworks=frameworks, subset=subset, model=model,
                      out=Path(out_dir), data=str(data), limit=limit, batch=batch,
                      overrides=overrides, corpus=corpus,
                      device=device or default_device(), seed=seed,
                      dtype=resolve_dtype(dtype, device or default_device()), device_map=device_map)
            for m in methods]
    with make_executor(executor_name, executor_opts) as executor:
        # Workers resolve the device themselves unless --device says (a CPU driver, GPU workers).
        summaries = run_sweep(cfgs, executor, device=device)
    for m, summary in zip(methods, summaries):
        rel = summary["overall"].get("reliability", {}).get("mean", float("nan"))
        log.info("%s: %d entries, reliability %.3f", m, summary["n_entries"], rel)
    path = write_tables(Path(out_dir), data)
    click.echo(f"wrote {path}")
