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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sage.api import SamplingParams
from sage.data.files import write_table
from sage.data.questions import read_questions, read_string_table
from sage.data.records import RecordStore
from sage.errors import SageInputError
from sage.executors import ExecutorOptions, make_executor
from sage.generation.base import BackendOptions
from sage.generation.factory import make_backend
from sage.generation.model_specs import resolve_model
from sage.generation.stages import (
    answer_items,
    clean_answer,
    clean_rot,
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


@dataclass(frozen=True)
class PipelineConfig:
    model: str = "smollm2-135m"  # the model under test
    backend: str | None = None  # default: the model's registry entry (transformers for HF ids/paths)
    prompt_format: str | None = None
    paraphraser: str | None = None  # default: the model under test
    paraphraser_backend: str | None = None
    rot_model: str | None = None  # default: the paraphraser
    rot_backend: str | None = None
    rots: bool = True  # write a Rule of Thumb for every answer
    questions: str | None = None  # default: the built-in demo set
    k: int = 5  # paraphrases per question
    samples: int = 1  # answers per paraphrase
    temperature: float = 0.0  # answers; 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    answer_max_new_tokens: int = 128
    record_logprobs: bool = False  # answers: add answer_logprob (sum of token log-probs) and answer_tokens
    rot_max_new_tokens: int = 48
    paraphrase_max_new_tokens: int | None = None  # default: 40 per paraphrase asked
    paraphrase_temperature: float = 0.7  # first round; later rounds add paraphrase_temperature_step
    paraphrase_temperature_step: float = 0.1
    min_parascore: float | None = None  # default 0.8 (SaGE paper); the authors' code used 0.6
    paraphrase_attempts: int = 4  # rounds per question at most
    paraphrase_requests: int = 2  # independent samples per question and round, K candidates each
    parascore_encoder: str | None = None  # default: the bundled all-MiniLM-L6-v2
    parascore_layers: int = 6
    base_urls: tuple[str, ...] = ()
    device: str | None = None
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on CPU
    device_map: str | None = None  # "auto": spread a large model over the GPUs
    batch_size: int = 16
    concurrency: int = 8
    max_retries: int = 5
    timeout: float = 60.0
    tensor_parallel_size: int = 1  # vllm
    enforce_eager: bool | None = None  # vllm (default: eager on a CPU)
    kv_cache_gib: float | None = None  # vllm (default: 4 on a CPU)
    out_dir: str = "sage-run"
    output: str = "responses.csv"
    cache_path: str | None = None  # default: <SAGE_CACHE_DIR>/generations.sqlite
    executor: str = "local"  # where backends run: local (this process) or ray (a cluster)
    executor_options: ExecutorOptions = field(default_factory=ExecutorOptions)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.samples < 1:
            raise SageInputError(f"samples per paraphrase must be >= 1 (got {self.samples})")
        if self.temperature < 0:
            raise SageInputError(f"temperature must be >= 0 (got {self.temperature})")


def _fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


class _Backends:
    """One cached backend per (model, backend, format), shared by the stages of a run."""

    def __init__(self, cfg: PipelineConfig, executor=None):
        self.cfg = cfg
        self._made: dict = {}
        self._own_executor = executor is None
        self.executor = make_executor(executor or cfg.executor, cfg.executor_options)
        self.options = BackendOptions(
            device=cfg.device, dtype=cfg.dtype, device_map=cfg.device_map, batch_size=cfg.batch_size,
            base_urls=tuple(cfg.base_urls),
            concurrency=cfg.concurrency, max_retries=cfg.max_retries, timeout=cfg.timeout,
            tensor_parallel_size=cfg.tensor_parallel_size, enforce_eager=cfg.enforce_eager,
            kv_cache_gib=cfg.kv_cache_gib, extra=dict(cfg.extra),
        )

    def get(self, model: str, backend: str | None, prompt_format: str | None = None):
        spec = resolve_model(model, backend=backend, prompt_format=prompt_format)
        key = (spec.model_id, spec.backend, spec.prompt_format)
        if key not in self._made:
            self._made[key] = (spec, make_backend(spec, self.options, cache_path=self.cfg.cache_path,
                                                  executor=self.executor))
        return self._made[key]

    def model_under_test(self):
        # --base-url without --backend means the model under test is served by those servers.
        backend = self.cfg.backend or ("openai" if self.cfg.base_urls else None)
        return self.get(self.cfg.model, backend, self.cfg.prompt_format)

    def paraphraser(self):
        if self.cfg.paraphraser is None:
            return self.model_under_test()
        return self.get(self.cfg.paraphraser, self.cfg.paraphraser_backend)

    def rot_writer(self):
        if self.cfg.rot_model is None:
            return self.paraphraser() if self.cfg.paraphraser else self.model_under_test()
        return self.get(self.cfg.rot_model, self.cfg.rot_backend)

    def calls(self) -> int:
        return sum(b.calls for _, b in self._made.values())

    def close(self) -> None:
        for _, b in self._made.values():
            b.close()
        self._made.clear()
        if self._own_executor:
            self.executor.close()


def _records(cfg: PipelineConfig, stage: str, fp: str) -> RecordStore:
    return RecordStore(Path(cfg.out_dir) / "records" / f"{stage}-{fp}.jsonl")


# --------------------------------------------------------------------------- stages
def generate_paraphrases(cfg: PipelineConfig, backends: _Backends | None = None, questions=None):
    """Paraphrase table (kept paraphrases), the table of all candidates with scores, and the
    stage report (rounds, rejections, questions short of K; `sage.paraphrase.stage.stage_report`).

    Questions that come with user paraphrases (a `paraphrase` column) are not paraphrased.
    """
    import pandas as pd

    from sage.paraphrase.parascore import DEFAULT_THRESHOLD, ParaScorer
    from sage.paraphrase.stage import (
        ParaphraseConfig,
        candidates_table,
        paraphrase_table,
        run_paraphrase_stage,
        stage_report,
        user_paraphrase_table,
    )

    questions = read_questions(cfg.questions) if questions is None else questions
    if "paraphrase" in questions.columns:
        log.info("using %d user-supplied paraphrases", len(questions))
        return user_paraphrase_table(questions), pd.DataFrame(), None
    own = backends is None
    backends = backends or _Backends(cfg)
    try:
        spec, backend = backends.paraphraser()
        pcfg = ParaphraseConfig(
            k=cfg.k, threshold=DEFAULT_THRESHOLD if cfg.min_parascore is None else cfg.min_parascore,
            max_attempts=cfg.paraphrase_attempts, requests_per_round=cfg.paraphrase_requests,
            temperature=cfg.paraphrase_temperature, temperature_step=cfg.paraphrase_temperature_step,
            max_new_tokens=cfg.paraphrase_max_new_tokens, seed=cfg.seed, batch_size=cfg.batch_size,
        )
        scorer = ParaScorer(cfg.parascore_encoder, num_layers=cfg.parascore_layers, device=cfg.device or "cpu")
        store = _records(cfg, "paraphrases", _fingerprint(spec.model_id, spec.backend, spec.prompt_format,
                                                          asdict(pcfg), scorer.describe()))
        run_paraphrase_stage(questions, backend, spec.format, scorer, store, pcfg)
        return paraphrase_table(questions, store), candidates_table(store), stage_report(store, cfg.k)
    finally:
        if own:
            backends.close()


def generate_answers(paraphrases, cfg: PipelineConfig, backends: _Backends | None = None):
    """The paraphrase table repeated per sample, with the model's `answer`."""
    _require(paraphrases, ["question_id", "paraphrase_id", "paraphrase"], "paraphrase table")
    own = backends is None
    backends = backends or _Backends(cfg)
    try:
        spec, backend = backends.model_under_test()
        params = SamplingParams(max_new_tokens=cfg.answer_max_new_tokens, temperature=cfg.temperature,
                                top_p=cfg.top_p, seed=cfg.seed, logprobs=cfg.record_logprobs)
        items = answer_items(paraphrases, cfg.samples)
        store = _records(cfg, "answers", _fingerprint(spec.model_id, spec.backend, spec.prompt_format, asdict(params)))
        run_items(items, backend, spec.format, params, store, clean_answer, "answer",
                  batch_size=cfg.batch_size, desc="answers")
        df = _expand_samples(paraphrases, cfg.samples)
        df["model"] = spec.alias
        df["answer"] = [store.records[it.key]["answer"] for it in items]
        if cfg.record_logprobs:  # of the raw generated tokens (before cleaning), end-of-sequence excluded
            records = [store.records[it.key] for it in items]
            for extra in LOGPROB_COLUMNS:
                df[extra] = [r.get(extra) for r in records]
            if params.samples_model_distribution:  # records written before the sampled column existed
                df["answer_logprob_sampled"] = df["answer_logprob_sampled"].fillna(df["answer_logprob"])
        return df
    finally:
        if own:
            backends.close()


def generate_rots(answers, cfg: PipelineConfig, backends: _Backends | None = None):
    """The answers table with a Rule of Thumb (`rot`) for every answer."""
    _require(answers, ["question_id", "paraphrase_id", "sample", "paraphrase", "answer"], "answers table")
    own = backends is None
    backends = backends or _Backends(cfg)
    try:
        spec, backend = backends.rot_writer()
        params = SamplingParams(max_new_tokens=cfg.rot_max_new_tokens, temperature=0.0, seed=cfg.seed)
        items = rot_items(answers)
        store = _records(cfg, "rots", _fingerprint(spec.model_id, spec.backend, spec.prompt_format, asdict(params)))
        run_items(items, backend, spec.format, params, store, clean_rot, "rot",
                  batch_size=cfg.batch_size, desc="rules of thumb")
        out = answers.copy()
        out["rot"] = [store.records[it.key]["rot"] for it in items]
        return out
    finally:
        if own:
            backends.close()


def run_pipeline(config: PipelineConfig | None = None, *, questions_table=None, executor=None, **overrides):
    """Paraphrase -> answer -> RoT; writes `<out_dir>/<output>` and returns the responses table.

    Columns: question_id, question, paraphrase_id, paraphrase, paraphrase_score, model, sample,
    answer, rot (no rot when `rots` is off); one row per question x paraphrase x sample. Also
    writes `<out_dir>/paraphrase_candidates.csv` (every candidate, kept or rejected, with scores)
    and `paraphrase_report.json`. `questions_table`: a checked questions table (default: read
    `config.questions`, a file). `responses.attrs["model_calls"]` counts the requests that reached a model
    (cache misses). `executor`: an `Executor` to run the backends on (default: `config.executor`).
    """
    cfg = replace(config or PipelineConfig(), **overrides)
    questions_table = read_questions(cfg.questions) if questions_table is None else questions_table
    out_dir = Path(cfg.out_dir)  # created with the first record or table: bad input leaves no empty folder
    backends = _Backends(cfg, executor)
    try:
        paraphrases, candidates, report = generate_paraphrases(cfg, backends, questions_table)
        if len(candidates):
            write_table(candidates, out_dir / "paraphrase_candidates.csv")
        if report is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "paraphrase_report.json").write_text(json.dumps(report, indent=2) + "\n")
        answers = generate_answers(paraphrases, cfg, backends)
        if cfg.rots:
            responses = generate_rots(answers, cfg, backends)
        else:
            responses = answers
        responses = responses[[c for c in RESPONSE_COLUMNS if c in responses.columns]
                              + [c for c in LOGPROB_COLUMNS if c in responses.columns]]
        from sage.data.responses import write_responses

        write_responses(responses, out_dir / cfg.output)
        responses.attrs["model_calls"] = backends.calls()  # requests that missed the cache
        responses.attrs["paraphrase_report"] = report
        responses.attrs["questions_report"] = {
            "n_questions": int(questions_table["question_id"].nunique()),
            "repeated_questions_merged": int(questions_table.attrs.get("repeated_questions_merged", 0))}
        log.info("wrote %d responses to %s (%d model calls, the rest cached)",
                 len(responses), out_dir / cfg.output, backends.calls())
        return responses
    finally:
        backends.close()


# --------------------------------------------------------------------------- helpers
def _require(df, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SageInputError(f"{what} lacks column(s) {', '.join(missing)}; it has: {', '.join(map(str, df.columns))}")


def _expand_samples(paraphrases, samples: int):
    """Each paraphrase row repeated per sample, in the order `answer_items` enumerates them."""
    import numpy as np

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


# --------------------------------------------------------------------------- any Python function
def score(questions, answer_fn, rot_fn=None, *, name: str = "python-function", batch: bool = False,
          paraphrases: int = 5, samples: int = 1, use_rots: bool = True, paraphraser: str = "smollm2-135m",
          paraphraser_backend: str | None = None, rot_model: str | None = None, rot_backend: str | None = None,
          min_parascore: float | None = None, out_dir: str | Path | None = None, score_config=None,
          seed: int = 0, device: str | None = None, progress: bool = True, **options):
    """Score the consistency of any Python function that answers a question (the SaGE library's
    `score(questions, get_response, use_rots=True)`), through the same paraphrase stage, RoT
    stage, generation cache and scoring as every backend.

    `questions`: a list of strings, a table with a `question` column, or a questions file.
    `answer_fn(question) -> str` (with `batch=True`: `answer_fn(questions) -> list[str]`) is
    the model under test; its cache entries are keyed by `name`, so give a new name when the
    function changes. RoTs come from `rot_fn(question, answer) -> str` when given, else from
    `rot_model` (default: the paraphraser); `use_rots=False` scores the answers only.
    Paraphrases come from `paraphraser` (default: the bundled SmolLM2-135M). Outputs go to
    `out_dir` (default `runs/<name>`), and a rerun resumes there. Further keyword `options` set
    `PipelineConfig` fields. Returns the `ScoreResult`.
    """
    import re

    from sage.data.questions import questions_frame, read_questions
    from sage.generation.callable_backend import register_function
    from sage.scoring import ScoreConfig, score_responses

    register_function(name, answer_fn, batch=batch)
    if rot_fn is not None:
        rot_model, rot_backend = register_function(f"{name}:rot", rot_fn, batch=batch), "callable"
    table = read_questions(questions) if isinstance(questions, (str, Path)) else questions_frame(questions)
    out = Path(out_dir) if out_dir is not None else Path("runs") / re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    cfg = PipelineConfig(model=name, backend="callable", paraphraser=paraphraser,
                         paraphraser_backend=paraphraser_backend, rot_model=rot_model or paraphraser,
                         rot_backend=rot_backend if rot_model else paraphraser_backend, rots=use_rots,
                         k=paraphrases, samples=samples, min_parascore=min_parascore, seed=seed, device=device,
                         out_dir=str(out), **options)
    responses = run_pipeline(cfg, questions_table=table)
    config = score_config or ScoreConfig(seed=seed)
    config = replace(config, skip_invalid=True)  # what the function answered is never "bad input"
    result = score_responses(responses, config, source=str(out / cfg.output), progress=progress)
    add_paraphrase_report(result.summary, responses)
    result.write(out)
    return result


def add_paraphrase_report(summary: dict, responses) -> None:
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
