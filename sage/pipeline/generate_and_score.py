"""Generate, then score: the one path of `sage score --model NAME` and of `sage.score(questions, fn)`.

The responses are generated (resumable: records and the generation cache), then scored in chunks
with the rows and edges streamed to the run folder, which is where `responses.<format>` is written,
once. What a model generated is never bad input: a question left with fewer than two answers is
listed as undefined and counted (`skip_invalid`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sage.pipeline.pipeline_config import PipelineConfig
from sage.pipeline.run import run_pipeline
from sage.scoring import ScoreConfig, ScoreResult, score_responses


def generate_and_score(pipeline: PipelineConfig, scoring: ScoreConfig | None = None, *, questions_table=None,
                       executor=None, progress: bool = True, table_format: str = "csv") -> ScoreResult:
    """Run paraphrase -> answer -> RoT with `pipeline`, score the responses with `scoring`, and write
    questions, responses, edges, summary.json and summary.md to `pipeline.out_dir`."""
    out = Path(pipeline.out_dir)
    responses = run_pipeline(pipeline, questions_table=questions_table, executor=executor, write=False)
    config = replace(scoring or ScoreConfig(seed=pipeline.seed), skip_invalid=True)
    result = score_responses(responses, config, source=str(out / f"responses.{table_format}"), progress=progress,
                             out_dir=out, table_format=table_format)
    add_generation_report(result.summary, responses)
    result.write(out, table_format)
    return result


def add_generation_report(summary: dict, responses) -> None:
    """Put the paraphrase stage's totals (questions short of K or with none), the questions file's
    counts (repeated rows merged) and the number of model calls (requests that missed the generation
    cache) into a run summary."""
    if "model_calls" in responses.attrs:
        summary["model_calls"] = int(responses.attrs["model_calls"])
    report = responses.attrs.get("paraphrase_report")
    if report is not None:
        summary["paraphrases"] = {k: v for k, v in report.items() if k != "per_question"}
    if responses.attrs.get("questions_report") is not None:
        summary["questions_file"] = responses.attrs["questions_report"]
