"""`sage generate paraphrases|answers|rots`: run one generation stage alone.

Each stage reads a table, writes one (.csv/.jsonl/.parquet) table to the output directory, and
resumes where a killed run stopped (records under <out-dir>/records, model calls cached).
"""
from __future__ import annotations

from pathlib import Path

import click

from sage.cli.options import (
    DTYPE_CHOICES,
    engine_options,
    executor_options,
    pop_executor,
    progress_option,
    quiet_model_loading,
    server_options,
)
from sage.cli.renamed_options import renamed
from sage.data.files import write_table
from sage.data.questions import questions_path, read_questions
from sage.data.run_dir import claim_run_dir

RENAMED = renamed({"--out-dir": "--out"})
_BACKEND_HELP = "transformers (default for local models), llamacpp, vllm or openai"


def _common(f):
    opts = [
        click.option("--backend", default=None, help=f"Generation backend: {_BACKEND_HELP}."),
        click.option("--base-url", "base_urls", multiple=True,
                     help="OpenAI-compatible endpoint (repeat to spread requests over servers); key from OPENAI_API_KEY."),
        click.option("--prompt-format", default=None,
                     help="chat (use the model's chat template), llama2, mistral, vicuna, falcon or plain."),
        click.option("--seed", default=0, show_default=True, type=int),
        click.option("--max-new-tokens", default=None, type=click.IntRange(min=1), help="Tokens per generation."),
        click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1)),
        click.option("--device", default=None, help="cpu or cuda (default: cuda when available)."),
        click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="auto", show_default=True,
                     help="Model weights' dtype: auto = bfloat16 on CUDA, float32 on CPU."),
        click.option("--device-map", default=None, help="'auto' spreads a large model over the GPUs (accelerate)."),
        click.option("--cache", "cache_path", default=None, type=click.Path(dir_okay=False),
                     help="Generation cache (default: $SAGE_CACHE_DIR/generations.sqlite)."),
        click.option("--out", "out_dir", default="sage-run", show_default=True, type=click.Path(file_okay=False),
                     help="Output directory (--out-dir, its old name, works until sage 0.3)."),
        click.option("--output", default=None, help="Output file name inside --out (.csv, .jsonl, .parquet)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return progress_option(executor_options(engine_options(server_options(f))))


def _config(common: dict, **fields):
    """The stage's PipelineConfig from the shared options and the stage's own (flat names)."""
    from sage.pipeline import PipelineConfig

    keys = ("base_urls", "seed", "batch_size", "device", "dtype", "device_map", "concurrency", "max_retries", "timeout",
            "tensor_parallel_size", "enforce_eager", "kv_cache_gib", "cache_path", "out_dir")
    executor, options = pop_executor(dict(common))
    return PipelineConfig.flat(**{k: common[k] for k in keys}, executor=executor, executor_options=options, **fields)


def _write(df, common: dict, default_name: str) -> None:
    path = write_table(df, Path(common["out_dir"]) / (common["output"] or default_name))
    click.echo(f"wrote {len(df)} rows to {path}")


def _claim(common: dict, default_name: str, inputs: dict, *extra_outputs: str):
    """Hold --out for the stage (`sage.data.run_dir`): no input overwritten, one run at a time."""
    return claim_run_dir(common["out_dir"], inputs=inputs, outputs=[common["output"] or default_name, *extra_outputs])


def _report_failed(failed: list[dict], what: str) -> None:
    """One line for the generations that failed on the server (empty texts in the table)."""
    if failed:
        shown = ", ".join(f"{f['question_id']}/{f['paraphrase_id']}/{f['sample']}" for f in failed[:10])
        more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
        click.echo(f"{len(failed)} {what} failed on the server and are empty in the table "
                   f"(question/paraphrase/sample {shown}{more}); first: {failed[0]['error']}")


def _tokens(common: dict, field: str) -> dict:
    return {field: common["max_new_tokens"]} if common["max_new_tokens"] else {}


@click.group("generate")
def command() -> None:
    """Run one stage of the generation pipeline: paraphrases, answers or rots."""
    quiet_model_loading()


@command.command("paraphrases", cls=RENAMED)
@click.option("--questions", default=None,
              help="Questions file with question_id,question, or a question set from `sage data list` "
                   "(default: the built-in demo set).")
@click.option("--model", default="smollm2-135m", show_default=True, help="Paraphraser model (alias, HF id or path).")
@click.option("-k", "--paraphrases", "k", default=5, show_default=True, type=click.IntRange(min=1),
              help="Paraphrases kept per question.")
@click.option("--min-parascore", default=None, type=float,
              help="ParaScore threshold (default 0.8 as in the SaGE paper; the authors' code used 0.6).")
@click.option("--attempts", default=4, show_default=True, type=click.IntRange(min=1),
              help="Rounds per question at most; each later round samples at a higher temperature.")
@click.option("--requests-per-round", default=2, show_default=True, type=click.IntRange(min=1),
              help="Independent samples per question and round, each asking for K paraphrases.")
@click.option("--temperature", default=0.7, show_default=True, type=click.FloatRange(min=0),
              help="First round's temperature.")
@click.option("--temperature-step", default=0.1, show_default=True, type=click.FloatRange(min=0),
              help="Added to the temperature in each further round (capped at 1.0).")
@_common
def paraphrases_cmd(questions, model, k, min_parascore, attempts, requests_per_round, temperature,
                    temperature_step, **common):
    """Paraphrase questions, keeping candidates above the ParaScore threshold."""

    from sage.pipeline import generate_paraphrases

    with _claim(common, "paraphrases.csv", {"--questions": questions}, "paraphrase_candidates.csv"):
        cfg = _config(common, questions=str(questions_path(questions)) if questions else None, paraphraser=model,
                      paraphraser_backend=common["backend"], model=model, prompt_format=common["prompt_format"], k=k,
                      min_parascore=min_parascore,
                      paraphrase_attempts=attempts, paraphrase_requests=requests_per_round,
                      paraphrase_temperature=temperature, paraphrase_temperature_step=temperature_step,
                      **_tokens(common, "paraphrase_max_new_tokens"))
        table, candidates, report = generate_paraphrases(cfg)
        if len(candidates):
            write_table(candidates, Path(common["out_dir"]) / "paraphrase_candidates.csv")
        if report is not None and report["short_of_k"]:
            click.echo(f"{len(report['short_of_k'])} of {report['n_questions']} questions got fewer than {k} "
                       f"paraphrases after {attempts} rounds ({len(report['no_paraphrase'])} with none): "
                       f"{', '.join(report['short_of_k'][:10])}")
        _write(table, common, "paraphrases.csv")


@command.command("answers", cls=RENAMED)
@click.option("--paraphrases", "paraphrases_file", type=click.Path(dir_okay=False), default=None,
              help="Paraphrase table (question_id, question, paraphrase_id, paraphrase[, paraphrase_score]).")
@click.option("--questions", default=None,
              help="Answer the questions (a file or a question set) as written instead (default: the demo set).")
@click.option("--model", default="smollm2-135m", show_default=True, help="Model under test.")
@click.option("-s", "--samples", default=1, show_default=True, type=click.IntRange(min=1),
              help="Answers per paraphrase.")
@click.option("-t", "--temperature", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="0 = greedy.")
@click.option("--logprobs", is_flag=True,
              help="Add answer_logprob (sum of the generated tokens' log-probabilities), "
                   "answer_logprob_sampled (under the distribution sampled from) and answer_tokens.")
@_common
def answers_cmd(paraphrases_file, questions, model, samples, temperature, logprobs, **common):
    """Answer every paraphrase (the papers' instruction: one paragraph, concisely)."""
    from sage.pipeline import generate_answers, load_table

    with _claim(common, "answers.csv", {"--paraphrases": paraphrases_file, "--questions": questions}):
        if paraphrases_file:
            table = load_table(paraphrases_file, "paraphrase table")
        else:
            table = read_questions(questions_path(questions) if questions else None).drop_duplicates("question_id")
            table = table.assign(paraphrase_id=0, paraphrase=table["question"], paraphrase_score=float("nan"))
        cfg = _config(common, model=model, backend=common["backend"], prompt_format=common["prompt_format"],
                      samples=samples, temperature=temperature, record_logprobs=logprobs,
                      **_tokens(common, "answer_max_new_tokens"))
        answers = generate_answers(table, cfg)
        _report_failed(answers.attrs.get("failed_answers", []), "answers")
        _write(answers, common, "answers.csv")


@command.command("rots", cls=RENAMED)
@click.option("--answers", "answers_file", required=True, type=click.Path(dir_okay=False),
              help="Answers table from `sage generate answers`.")
@click.option("--model", default="smollm2-135m", show_default=True, help="Rule-of-Thumb writer.")
@_common
def rots_cmd(answers_file, model, **common):
    """Write a Rule of Thumb for every answer."""
    from sage.pipeline import generate_rots, load_table

    with _claim(common, "rots.csv", {"--answers": answers_file}):
        table = load_table(answers_file, "answers table")
        cfg = _config(common, rot_model=model, rot_backend=common["backend"],
                      **_tokens(common, "rot_max_new_tokens"))
        rots = generate_rots(table, cfg)
        _report_failed(rots.attrs.get("failed_rots", []), "rules of thumb")
        _write(rots, common, "rots.csv")
