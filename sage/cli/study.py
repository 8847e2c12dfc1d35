"""`sage study edit-consistency`: consistency of the edited judgment before and after edits."""
from __future__ import annotations

import click

from sage.cli.options import (
    executor_options,
    pop_executor,
    precision_options,
    progress_option,
)

_FRAMEWORKS = ("care_ethics", "deontology", "utilitarianism", "virtue_ethics")


@click.group("study")
def command():
    """Studies that combine editing with consistency scoring."""


@command.command("edit-consistency")
@click.option("--method", "methods", multiple=True,
              help="Editing method (repeatable); 'NAME:batch' applies all entries in one edit. "
                   "Default: rome, lora, ike, memit:batch.")
@click.option("--framework", "frameworks", multiple=True, type=click.Choice(_FRAMEWORKS),
              help="Ethical framework (repeatable); default: all four.")
@click.option("--subset", type=click.Choice(["broad", "specific"]), default="broad", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="First N entries per framework.")
@click.option("--model", default="smollm2-135m", show_default=True, help="Model alias, path or Hugging Face id (downloaded once unless --offline).")
@click.option("--out", "out_dir", default="results/edit-consistency", show_default=True, type=click.Path())
@click.option("--data", "data_dir", default=None, type=click.Path(),
              help="CounterMoral directory (default: the copy `sage data download countermoral` keeps in the "
                   "sage cache, downloaded on first use when online).")
@click.option("-k", "--paraphrases", "k", default=5, show_default=True, type=click.IntRange(min=1),
              help="Paraphrases of the open question per entry.")
@click.option("--question-template", default=None,
              help="Open question about the action; must contain {action}, may contain {relation}.")
@click.option("--completion-tokens", default=24, show_default=True, type=click.IntRange(min=1))
@click.option("--answer-tokens", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--rot-tokens", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--hparams", "hparams_file", default=None, type=click.Path(),
              help='JSON file {"method": {overrides}} of hyperparameters per method.')
@click.option("--corpus", default=None, type=click.Path(), help="Text file for key statistics.")
@click.option("--device", default=None, help="torch device (default: SAGE_DEVICE or cuda if available).")
@click.option("--seed", default=0, show_default=True, type=int)
@precision_options
@progress_option
@executor_options
def edit_consistency(methods, frameworks, subset, limit, model, out_dir, data_dir, k, question_template,
                     completion_tokens, answer_tokens, rot_tokens, hparams_file, corpus, device, seed, dtype, device_map,
                     no_progress, **executor_kw):
    """Before/after-edit SGE and baselines on completions and open-question answers and RoTs.

    With --executor ray, the pre-edit texts and each method's edits run as per-entry units on a Ray
    cluster (--device names the workers' device; default: the driver's)."""
    from dataclasses import replace
    from pathlib import Path

    from sage.editing.base import load_overrides
    from sage.editing.dataset import default_data_dir
    from sage.errors import SageInputError
    from sage.models.causal_lm import resolve_dtype
    from sage.settings import default_device
    from sage.studies.edit_consistency import StudyConfig, run_study
    from sage.studies.probes import DEFAULT_QUESTION_TEMPLATE

    executor, executor_opts = pop_executor(executor_kw)
    overrides = load_overrides(hparams_file)
    for name, ov in overrides.items():
        if not isinstance(ov, dict):
            raise SageInputError(f"{hparams_file}: field {name!r} must be an object of overrides "
                                 "for that method")
    cfg = StudyConfig(
        methods=tuple(methods) or StudyConfig.methods, frameworks=tuple(frameworks) or _FRAMEWORKS,
        subset=subset, limit=limit, model=model, out=out_dir,
        data=str(data_dir) if data_dir else None, k=k,
        question_template=question_template or DEFAULT_QUESTION_TEMPLATE,
        completion_tokens=completion_tokens, answer_tokens=answer_tokens, rot_tokens=rot_tokens,
        overrides=overrides, corpus=corpus, device=device or default_device(), seed=seed,
        dtype=resolve_dtype(dtype, device or default_device()), device_map=device_map)
    if cfg.data is None:  # options are validated above before CounterMoral is located (or downloaded)
        cfg = replace(cfg, data=str(default_data_dir()))
    from sage.editing.runner import check_data
    from sage.models.resolve import resolve_model_path

    check_data(cfg.data, [(m.partition(":")[0], m.partition(":")[2] == "batch") for m in cfg.methods],
               cfg.frameworks, cfg.subset, cfg.limit)
    resolve_model_path(cfg.model, what="generator model", download=False)
    from sage.executors import make_executor

    with make_executor(executor, executor_opts) as ex:
        run_study(cfg, executor=ex)
    click.echo(f"wrote {Path(out_dir) / 'summary.md'}")
