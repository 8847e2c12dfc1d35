"""Paraphrase -> answer -> Rule of Thumb, resumable, returning the responses table.

`run_pipeline(...)` is what `sage score --model NAME` calls; `sage generate` runs the three
stage functions alone. Each stage appends one record per finished item under
`<out_dir>/records/` (file names carry a fingerprint of the stage's model and settings, so a
changed setting never reuses stale records) and every model call goes through the SQLite
generation cache. Killing a run at any moment and starting it again yields the same table with
no lost or duplicated rows; rerunning finished work makes no model calls.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np

from sage.api import SamplingParams
from sage.data.files import write_table
from sage.data.questions import read_questions, read_string_table
from sage.data.records import RecordStore
from sage.data.responses import write_responses
from sage.errors import SageInputError
from sage.outputs import write_text
from sage.paraphrase.parascore import ParaScorer
from sage.pipeline.backends import RunBackends
from sage.pipeline.pipeline_config import PipelineConfig
from sage.pipeline.paraphrase_stage import (
    candidates_table,
    paraphrase_table,
    run_paraphrase_stage,
    stage_report,
    user_paraphrase_table,
)
from sage.pipeline.stages import (
    answer_items,
    clean_answer,
    clean_rot,
    failed_items,
    rot_items,
    run_items,
)

log = logging.getLogger(__name__)

RESPONSE_COLUMNS = [
    "question_id", "question", "paraphrase_id", "paraphrase", "paraphrase_score",
    "model", "sample", "answer", "rot",
]
# With record_logprobs (weighted semantic entropy): under the model, under the distribution sampled from.
LOGPROB_COLUMNS = ["answer_logprob", "answer_tokens", "answer_logprob_sampled"]


def _fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _records(cfg: PipelineConfig, stage: str, fp: str) -> RecordStore:
    return RecordStore(Path(cfg.out_dir) / "records" / f"{stage}-{fp}.jsonl")


# --------------------------------------------------------------------------- stages
def generate_paraphrases(cfg: PipelineConfig, backends: RunBackends | None = None, questions=None):
    """Paraphrase table (kept paraphrases), the table of all candidates with scores, and the
    stage report (rounds, rejections, questions short of K; `sage.pipeline.paraphrase_stage.stage_report`).

    Questions that come with user paraphrases (a `paraphrase` column) are not paraphrased.
    """
    import pandas as pd

    questions = read_questions(cfg.questions) if questions is None else questions
    if "paraphrase" in questions.columns:
        log.info("using %d user-supplied paraphrases", len(questions))
        return user_paraphrase_table(questions), pd.DataFrame(), None
    own = backends is None
    backends = backends or RunBackends(cfg)
    try:
        spec, backend = backends.paraphraser()
        pcfg = cfg.paraphrase_stage()
        scorer = ParaScorer(cfg.parascore.encoder, num_layers=cfg.parascore.layers, device=cfg.backend.device or "cpu")
        store = _records(cfg, "paraphrases", _fingerprint(spec.model_id, spec.backend, spec.prompt_format,
                                                          asdict(pcfg), scorer.describe()))
        run_paraphrase_stage(questions, backend, spec.format, scorer, store, pcfg)
        return paraphrase_table(questions, store), candidates_table(store), stage_report(store, pcfg.k)
    finally:
        if own:
            backends.close()


def generate_answers(paraphrases, cfg: PipelineConfig, backends: RunBackends | None = None):
    """The paraphrase table repeated per sample, with the model's `answer`."""
    _require(paraphrases, ["question_id", "paraphrase_id", "paraphrase"], "paraphrase table")
    own = backends is None
    backends = backends or RunBackends(cfg)
    try:
        spec, backend = backends.model_under_test()
        answers = cfg.answers
        params = SamplingParams(max_new_tokens=answers.max_new_tokens, temperature=answers.temperature,
                                top_p=answers.top_p, seed=cfg.seed, logprobs=answers.record_logprobs)
        items = answer_items(paraphrases, answers.samples)
        store = _records(cfg, "answers", _fingerprint(spec.model_id, spec.backend, spec.prompt_format, asdict(params)))
        run_items(items, backend, spec.format, params, store, clean_answer, "answer",
                  batch_size=cfg.backend.batch_size, desc="answers")
        df = _expand_samples(paraphrases, answers.samples)
        df["model"] = spec.alias
        df["answer"] = [store.records[it.key]["answer"] for it in items]
        df.attrs["failed_answers"] = _log_failed(failed_items(items, store), "answers", spec.alias)
        if answers.record_logprobs:  # of the raw generated tokens (before cleaning), end-of-sequence excluded
            records = [store.records[it.key] for it in items]
            for extra in LOGPROB_COLUMNS:
                df[extra] = [r.get(extra) for r in records]
            if params.samples_model_distribution:  # records written before the sampled column existed
                df["answer_logprob_sampled"] = df["answer_logprob_sampled"].fillna(df["answer_logprob"])
        return df
    finally:
        if own:
            backends.close()


def generate_rots(answers, cfg: PipelineConfig, backends: RunBackends | None = None):
    """The answers table with a Rule of Thumb (`rot`) for every answer."""
    _require(answers, ["question_id", "paraphrase_id", "sample", "paraphrase", "answer"], "answers table")
    own = backends is None
    backends = backends or RunBackends(cfg)
    try:
        spec, backend = backends.rot_writer()
        params = SamplingParams(max_new_tokens=cfg.rots.max_new_tokens, temperature=0.0, seed=cfg.seed)
        items = rot_items(answers)
        store = _records(cfg, "rots", _fingerprint(spec.model_id, spec.backend, spec.prompt_format, asdict(params)))
        run_items(items, backend, spec.format, params, store, clean_rot, "rot",
                  batch_size=cfg.backend.batch_size, desc="rules of thumb")
        out = answers.copy()
        out["rot"] = [store.records[it.key]["rot"] for it in items]
        out.attrs["failed_rots"] = _log_failed(failed_items(items, store), "rules of thumb", spec.alias)
        return out
    finally:
        if own:
            backends.close()


def run_pipeline(config: PipelineConfig | None = None, *, questions_table=None, executor=None, write: bool = True,
                 **overrides):
    """Paraphrase -> answer -> RoT; returns the responses table (and writes it to
    `<out_dir>/<output>` unless `write` is off: `generate_and_score` lets scoring write it once).

    Columns: question_id, question, paraphrase_id, paraphrase, paraphrase_score, model, sample,
    answer, rot (no rot when RoTs are off); one row per question x paraphrase x sample. Also
    writes `<out_dir>/paraphrase_candidates.csv` (every candidate, kept or rejected, with scores)
    and `paraphrase_report.json`. `questions_table`: a checked questions table (default: read
    `config.questions`, a file). `responses.attrs["model_calls"]` counts the requests that reached a model
    (cache misses). `executor`: an `Executor` to run the backends on (default: `config.executor`).
    `overrides`: settings by their flat names (`sage.pipeline.pipeline_config.FLAT_NAMES`) or top-level fields.
    """
    cfg = (config or PipelineConfig()).with_flat(**overrides)
    questions_table = read_questions(cfg.questions) if questions_table is None else questions_table
    out_dir = Path(cfg.out_dir)  # created with the first record or table: bad input leaves no empty folder
    backends = RunBackends(cfg, executor)
    try:
        paraphrases, candidates, report = generate_paraphrases(cfg, backends, questions_table)
        if len(candidates):
            write_table(candidates, out_dir / "paraphrase_candidates.csv")
        if report is not None:
            write_text(out_dir / "paraphrase_report.json", json.dumps(report, indent=2) + "\n")
        answers = generate_answers(paraphrases, cfg, backends)
        responses = generate_rots(answers, cfg, backends) if cfg.rots.enabled else answers
        failed = answers.attrs.get("failed_answers", []) + [{**f, "stage": "rot"}
                                                              for f in responses.attrs.get("failed_rots", [])]
        responses = responses[[c for c in RESPONSE_COLUMNS if c in responses.columns]
                              + [c for c in LOGPROB_COLUMNS if c in responses.columns]]
        if write:
            write_responses(responses, out_dir / cfg.output)
        responses.attrs["model_calls"] = backends.calls()  # requests that missed the cache
        responses.attrs["failed_answers"] = failed  # empty texts: scoring skips them and counts undefined questions
        responses.attrs["paraphrase_report"] = report
        responses.attrs["questions_report"] = {
            "n_questions": int(questions_table["question_id"].nunique()),
            "repeated_questions_merged": int(questions_table.attrs.get("repeated_questions_merged", 0))}
        log.info("generated %d responses (%d model calls, the rest cached)", len(responses), backends.calls())
        return responses
    finally:
        backends.close()


# --------------------------------------------------------------------------- helpers
def _log_failed(failed: list[dict], what: str, model: str) -> list[dict]:
    if failed:
        log.warning("%s: %d %s failed and count as empty (first: question %s: %s)", model, len(failed), what,
                    failed[0]["question_id"], failed[0]["error"])
    return failed


def _require(df, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SageInputError(f"{what} lacks column(s) {', '.join(missing)}; it has: {', '.join(map(str, df.columns))}")


def _expand_samples(paraphrases, samples: int):
    """Each paraphrase row repeated per sample, in the order `answer_items` enumerates them."""

    base = paraphrases.reset_index(drop=True)
    df = base.loc[base.index.repeat(samples)].reset_index(drop=True)
    df["sample"] = np.tile(np.arange(samples), len(base))
    return df


def load_table(path: str | Path, what: str):
    df = read_string_table(path, what)
    for col in ("paraphrase_id", "sample"):
        if col in df.columns:
            df[col] = df[col].astype(int)
    if "question_id" in df.columns:
        df["question_id"] = df["question_id"].astype(str)
    return df
