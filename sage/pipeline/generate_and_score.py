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
    counts (repeated rows merged), the number of model calls (requests that missed the generation
    cache) and the failed answers (`failed_answers`, also one line in `warnings`) into a run summary."""
    if "model_calls" in responses.attrs:
        summary["model_calls"] = int(responses.attrs["model_calls"])
    report = responses.attrs.get("paraphrase_report")
    if report is not None:
        summary["paraphrases"] = {k: v for k, v in report.items() if k != "per_question"}
    if responses.attrs.get("questions_report") is not None:
        summary["questions_file"] = responses.attrs["questions_report"]
    failed = responses.attrs.get("failed_answers") or []
    if failed:  # the server refused a prompt or answered with no content: empty answers, counted
        summary["failed_answers"] = {"n": len(failed), "items": failed}
        shown = "; ".join(_failed_label(f) for f in failed[:5]) + (f"; and {len(failed) - 5} more" if len(failed) > 5 else "")
        summary.setdefault("warnings", []).append(
            f"{len(failed)} generation(s) failed on the server and count as empty answers (a question left with "
            f"fewer than two answers is undefined): {shown}")


def _failed_label(f: dict) -> str:
    what = "RoT of " if f.get("stage") == "rot" else ""
    return f"{what}question {f['question_id']} paraphrase {f['paraphrase_id']} sample {f['sample']} ({f['error']})"
