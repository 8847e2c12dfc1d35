"""`sage score`: score a responses table with SGE and the baselines."""
from __future__ import annotations

from pathlib import Path

import click

from sage.cli.options import (
    csv_list,
    engine_options,
    executor_options,
    measure_options,
    pop_engine,
    pop_executor,
    pop_measures,
    precision_options,
    preset_option,
    progress_option,
    quiet_model_loading,
    server_options,
)
from sage.data.questions import questions_path
from sage.data.run_dir import claim_run_dir
from sage.errors import SageInputError
from sage.metrics.similarity import SimilarityOptions


def _print_summary(summary: dict) -> None:
    """Metrics as rows and models as columns, so the table fits a terminal."""
    from rich.console import Console
    from rich.table import Table

    from sage.scoring import headline_columns

    table = Table(title="SaGE consistency: mean [95% CI] over questions")
    table.add_column("Metric")
    models = list(summary["models"])
    for model in models:
        n = summary["models"][model]["n_questions_scored"]
        table.add_column(f"{model} (n={n})", justify="right")
    for col, label in headline_columns(summary):
        cells = []
        for model in models:
            s = summary["models"][model]["metrics"].get(col)
            cells.append("n/a" if not s or s["n"] == 0 else f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]")
        table.add_row(label, *cells)
    undefined = summary.get("undefined_questions") or []
    if undefined:
        ids = ", ".join(f"{u['question_id']}" + (f" ({u['model']})" if len(models) > 1 else "") for u in undefined[:20])
        more = f" and {len(undefined) - 20} more" if len(undefined) > 20 else ""
        table.caption = (f"{len(undefined)} question(s) undefined (fewer than two answers), excluded from the means: "
                         f"{ids}{more}")
    Console().print(table)


def run_outputs(table_format: str) -> list[str]:
    """The files a `sage score` run writes into --out (an input there must not be one of them)."""
    tables = [f"{name}.{table_format}" for name in ("questions", "responses", "edges")]
    return [*tables, "summary.json", "summary.md", "paraphrase_candidates.csv", "paraphrase_report.json"]


def _score_config(options: dict):
    """The ScoreConfig from the command's options (removing the ones it reads)."""
    from sage.scoring import ScoreConfig

    sim = {k: options.pop(k) for k in ("embedder", "bertscore_model", "bertscore_layers", "encoder_backend",
                                        "nli_model", "nli_edge", "nli_batch_size", "nli_question", "judge_model",
                                        "judge_backend")}
    sim.update(device=options["device"], judge_base_urls=tuple(options.pop("judge_base_urls")),
               cache_path=options.pop("judge_cache"))
    return ScoreConfig(
        metrics=csv_list(options.pop("metrics")), on=csv_list(options.pop("on")),
        sge_edges=csv_list(options.pop("sge_edges")), similarity=SimilarityOptions(**sim),
        skip_invalid=options.pop("skip_invalid"), n_boot=options.pop("n_boot"), seed=options["seed"],
        **pop_measures(options))


def _pipeline_config(model: str, out: Path, options: dict):
    """The PipelineConfig of `sage score --model` from the command's options (removing them)."""
    from sage.pipeline import PipelineConfig

    executor, executor_opts = pop_executor(options)
    questions = options.pop("questions")
    flat = {k: options.pop(k) for k in ("samples", "temperature", "backend", "paraphraser", "rot_model",
                                         "min_parascore", "record_logprobs", "concurrency", "max_retries",
                                         "timeout", "dtype", "device_map")}
    flat.update(pop_engine(options), k=options.pop("paraphrases"), answer_max_new_tokens=options.pop("max_new_tokens"),
                base_urls=tuple(options.pop("base_urls")), seed=options["seed"], device=options["device"])
    return PipelineConfig.flat(model=model, questions=str(questions_path(questions)) if questions else None,
                               out_dir=str(out), executor=executor, executor_options=executor_opts, **flat)


@click.command("score")
@click.option("--responses", "responses", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Score an existing responses table (.csv, .jsonl, .parquet; one row per answer, or the SaGE "
                   "authors' pair layout) instead of generating one.")
@click.option("--model", default=None,
              help="Model under test: generate paraphrases, answers and RoTs, then score (default: smollm2-135m "
                   "when --responses is not given). An alias, a Hugging Face id (downloaded once unless "
                   "--offline), or a path.")
@click.option("--questions", default=None,
              help="Questions file (question_id, question) or a question set name from `sage data list` "
                   "(default: the built-in demo set).")
@click.option("--paraphrases", type=int, default=5, show_default=True, help="Paraphrases per question (K).")
@click.option("--samples", type=int, default=1, show_default=True, help="Answers sampled per paraphrase (S).")
@click.option("--temperature", type=float, default=0.0, show_default=True, help="Answer sampling temperature (0 = greedy).")
@click.option("--backend", default=None, help="Generation backend: transformers, llamacpp, vllm, openai (default: the model's).")
@click.option("--base-url", "base_urls", multiple=True, help="OpenAI-compatible endpoint(s); repeat to spread requests.")
@server_options
@engine_options
@click.option("--paraphraser", default=None, help="Model writing paraphrases (default: the model under test).")
@click.option("--rot-model", default=None, help="Model writing Rules of Thumb (default: the paraphraser).")
@click.option("--min-parascore", type=float, default=None, help="ParaScore threshold for paraphrases (default 0.8).")
@click.option("--max-new-tokens", type=click.IntRange(1), default=128, show_default=True, help="Tokens per answer.")
@click.option("--record-logprobs", is_flag=True,
              help="Record each answer's sequence log-probability (answer_logprob under the model, "
                   "answer_logprob_sampled under the distribution sampled from, answer_tokens) for the "
                   "likelihood-weighted semantic entropy.")
@click.option("--embedder", default=None, help="Sentence-transformers id, alias (stsb-distilroberta-base-v2: the "
                                                "SaGE authors') or path (default: bundled all-MiniLM-L6-v2).")
@click.option("--metrics", default="sge,bleu,rouge_l,bertscore,cosine", show_default=True,
              help="Comma-separated metrics: sge, se (semantic entropy; needs nli or judge edges), the graph "
                   "measures num_sets, eigv, degree, eccentricity, kle (on every --sge-edges similarity), bleu, "
                   "rouge_l (alias lexsim), bertscore, cosine.")
@click.option("--on", "on", default=None, help="Text columns to score: answer,rot (default: answer, plus rot if present).")
@click.option("--sge-edges", default="cosine", show_default=True,
              help="Edge similarities of the answer graphs SGE and the graph measures use (d = 1 - sim): cosine, "
                   "bertscore, rouge_l, bleu, nli, judge, or column:NAME (a similarity column of a pair-layout "
                   "file, e.g. column:cosine_model_output). The first gives sge_<col>, eigv_<col>, ...; the first "
                   "of nli/judge gives se_<col>.")
@click.option("--nli-model", default=None,
              help="NLI model for nli edges: a Hugging Face sequence-classification NLI model id (in the local "
                   "cache) or path, e.g. microsoft/deberta-large-mnli.")
@click.option("--nli-edge", type=click.Choice(["entail", "not-contradict", "graded", "kle-onehot"]),
              default="entail", show_default=True,
              help="nli edge similarity: mean bidirectional P(entailment), 1 - max P(contradiction), mean "
                   "bidirectional P(entailment) + 0.5 P(neutral) (graded, LM-Polygraph's KLE), or the mean of "
                   "the argmax label's weight 1 / 0.5 / 0 (kle-onehot, the official KLE graph).")
@click.option("--nli-question/--no-nli-question", default=True, show_default=True,
              help="NLI inputs '{question} {answer}' when the table has the question (as the references do).")
@click.option("--nli-batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--judge-model", default=None,
              help="LLM judge for judge edges: an alias (e.g. smollm2-135m), HF id in the cache, path or API model.")
@click.option("--judge-backend", default=None, help="Backend of the judge: transformers, llamacpp, vllm, openai.")
@click.option("--judge-base-url", "judge_base_urls", multiple=True, help="OpenAI-compatible endpoint(s) of the judge.")
@click.option("--judge-cache", type=click.Path(dir_okay=False), default=None,
              help="Generation cache for judge calls (default: $SAGE_CACHE_DIR/generations.sqlite).")
@click.option("--encoder-backend", type=click.Choice(["torch", "onnx"]), default="torch", show_default=True,
              help="Run the sentence encoder (cosine, BERTScore) with torch or ONNX Runtime (the onnx extra).")
@click.option("--bertscore-model", default=None, help="BERTScore encoder id or path (default: the embedder).")
@click.option("--bertscore-layers", type=int, default=None, help="BERTScore layer (default: the model's last).")
@click.option("--model-name", default=None, help="Model label when the table has no 'model' column (default: file stem).")
@click.option("--skip-invalid", is_flag=True, help="Skip rows with empty/NaN texts and report single-row questions as undefined, counting both.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output directory (default: runs/<responses file stem or model name>).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for generation and the bootstrap.")
@click.option("--n-boot", type=int, default=2000, show_default=True, help="Bootstrap resamples for the CIs.")
@click.option("--device", default=None, help="torch device for models (default: cpu).")
@precision_options
@click.option("--table-format", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True,
              help="Format of questions, responses and edges tables (parquet for large runs).")
@progress_option
@preset_option()
@executor_options
@measure_options
def command(responses, model, out, table_format, no_progress, **options):
    """Score consistency: generate with --model (default smollm2-135m), or score a --responses table.

    Writes questions.csv, summary.json, summary.md and responses.csv to --out.
    """

    from sage.pipeline import generate_and_score
    from sage.pipeline.pipeline_config import default_run_dir
    from sage.scoring import score_responses

    options.pop("preset")  # applied by its callback as the other options' defaults
    quiet_model_loading()
    if responses is not None and model is not None:
        raise SageInputError("give either --responses (score a table) or --model (generate, then score), not both")
    config = _score_config(options)
    if responses is None:
        model = model or "smollm2-135m"
        out = out or default_run_dir(model)
    else:
        out = out or Path("runs") / responses.stem
    with claim_run_dir(out, inputs={"--responses": responses, "--questions": options["questions"]},
                       outputs=run_outputs(table_format)):
        if responses is None:
            result = generate_and_score(_pipeline_config(model, out, options), config, progress=not no_progress,
                                        table_format=table_format)
        else:
            result = score_responses(responses, config, source=str(responses), progress=not no_progress,
                                     out_dir=out, table_format=table_format, model_name=options["model_name"],
                                     default_model=responses.stem)  # read in chunks
            result.write(out, table_format)
    _print_summary(result.summary)
    for w in result.summary.get("warnings", []):
        click.echo(f"warning: {w}", err=True)
    written = [out / f"{name}.{table_format}" for name in ("questions", "responses", "edges")]
    click.echo(f"wrote {', '.join(map(str, written))}, {out / 'summary.json'}, {out / 'summary.md'}")
    if not any(m["n_questions_scored"] for m in result.summary["models"].values()):
        click.echo(f"error: no question has two or more answers, so nothing could be scored (see {out / 'summary.json'}); "
                   "add paraphrases or samples (--paraphrases, --samples), or lower --min-parascore", err=True)
        raise click.exceptions.Exit(1)
