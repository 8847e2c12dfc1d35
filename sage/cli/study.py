"""`sage study edit-consistency`: consistency of the edited judgment before and after edits."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from sage.cli.editing_options import (
    FRAMEWORKS,
    check_sequential_options,
    editing_options,
    parse_methods,
    read_hparams,
    sequential_options,
)
from sage.cli.options import pop_executor, quiet_model_loading
from sage.data.run_dir import claim_run_dir
from sage.editing.dataset import default_data_dir
from sage.editing.runner import check_data, sequential_context
from sage.executors import make_executor
from sage.models.causal_lm import resolve_dtype
from sage.models.resolve import resolve_model_path
from sage.settings import default_device


@click.group("study")
def command():
    """Studies that combine editing with consistency scoring."""


@command.command("edit-consistency")
@editing_options(default_out="results/edit-consistency",
                 method_help="Editing method (repeatable); default: rome, lora, ike, memit:batch.")
@click.option("-k", "--paraphrases", "k", default=5, show_default=True, type=click.IntRange(min=1),
              help="Paraphrases of the open question per entry.")
@click.option("--question-template", default=None,
              help="Open question about the action; must contain {action}, may contain {relation}.")
@click.option("--completion-tokens", default=24, show_default=True, type=click.IntRange(min=1))
@click.option("--answer-tokens", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--rot-tokens", default=32, show_default=True, type=click.IntRange(min=1))
@sequential_options("Edit the entries one after another without restoring, and measure at each of --checkpoints the "
                    "edited actions so far and a fixed control set of unrelated questions.",
                    "texts are collected")
@click.option("--controls", default=5, show_default=True, type=click.IntRange(min=1),
              help="--sequential: unrelated control entries per framework, from the other subset.")
def edit_consistency(methods, frameworks, hparams_file, out_dir, data_dir, sequential, checkpoints, drift_texts,
                     controls, **options):
    """Before/after-edit SGE and baselines on completions and open-question answers and RoTs.

    With --executor ray, the pre-edit texts and each method's edits run as per-entry units on a Ray
    cluster (--device names the workers' device; default: the driver's)."""

    from sage.studies.edit_consistency import StudyConfig, run_study
    from sage.studies.sequential_consistency import (
        SEQUENTIAL_METHODS,
        SequentialStudyConfig,
        control_entries,
        run_sequential_study,
    )
    from sage.studies.probes import DEFAULT_QUESTION_TEMPLATE

    quiet_model_loading()
    executor, executor_opts = pop_executor(options)
    methods = tuple(methods) or (SEQUENTIAL_METHODS if sequential else StudyConfig.methods)
    choices = parse_methods(methods)  # unknown names and modes: one line, before anything loads
    marks = check_sequential_options(choices, sequential, checkpoints, None, executor, drift_texts)
    overrides = read_hparams(hparams_file, [c.name for c in choices])
    device = options["device"]
    cfg = StudyConfig(
        methods=methods, frameworks=tuple(frameworks) or FRAMEWORKS,
        subset=options["subset"], limit=options["limit"], model=options["model"], out=out_dir,
        data=str(data_dir) if data_dir else None, k=options["k"],
        question_template=options["question_template"] or DEFAULT_QUESTION_TEMPLATE,
        completion_tokens=options["completion_tokens"], answer_tokens=options["answer_tokens"],
        rot_tokens=options["rot_tokens"], overrides=overrides, corpus=options["corpus"],
        device=device or default_device(), seed=options["seed"],
        dtype=resolve_dtype(options["dtype"], device or default_device()), device_map=options["device_map"])
    if cfg.data is None:  # options are validated above before CounterMoral is located (or downloaded)
        cfg = replace(cfg, data=str(default_data_dir()))

    check_data(cfg.data, [(c.name, c.batch) for c in choices], cfg.frameworks, cfg.subset, cfg.limit)
    resolve_model_path(cfg.model, what="generator model", download=False)

    with claim_run_dir(out_dir, inputs={"--hparams": hparams_file}, outputs=["summary.json", "summary.md"]):
        if sequential:
            for c in choices:  # the control entries (the other subset) and any pool a method reads
                sequential_context(cfg.data, cfg.subset, method=c.name)
            scfg = SequentialStudyConfig(cfg, checkpoints=marks, controls=controls,
                                         drift_texts=drift_texts or SequentialStudyConfig.drift_texts)
            control_entries(cfg, controls)
            run_sequential_study(scfg)
            click.echo(f"wrote {Path(out_dir) / 'summary.md'}")
            return
        with make_executor(executor, executor_opts) as ex:
            run_study(cfg, executor=ex)
        click.echo(f"wrote {Path(out_dir) / 'summary.md'}")
