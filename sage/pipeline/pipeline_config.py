"""A generation run's settings: one typed config per stage, nested in `PipelineConfig`.

Built once (by the CLI, by `sage.score`, or in code) and handed to the stages unchanged:

    PipelineConfig(model=ModelRole("llama2-7b"), paraphrase=ParaphraseConfig(k=5),
                   answers=AnswerConfig(samples=2, temperature=0.7), backend=BackendOptions(dtype="bfloat16"))

`PipelineConfig.flat(k=5, samples=2, ...)` (and `run_pipeline(**overrides)`) also take the flat
names of the one-level config earlier releases had (`FLAT_NAMES`); each lands in its stage's config.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sage.errors import SageInputError
from sage.executors import ExecutorOptions
from sage.generation.backend_registry import BackendOptions
from sage.pipeline.paraphrase_stage import ParaphraseConfig


@dataclass(frozen=True)
class ModelRole:
    """Which model plays a part (the model under test, the paraphraser, the RoT writer).

    `name` None: the default for the part (the paraphraser defaults to the model under test, the
    RoT writer to the paraphraser); `backend` None: the model's registry entry; `prompt_format`
    None: the model's own."""

    name: str | None = None
    backend: str | None = None
    prompt_format: str | None = None


@dataclass(frozen=True)
class AnswerConfig:
    samples: int = 1  # answers per paraphrase
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    max_new_tokens: int = 128
    record_logprobs: bool = False  # add answer_logprob, answer_logprob_sampled, answer_tokens

    def __post_init__(self):
        if self.samples < 1:
            raise SageInputError(f"samples per paraphrase must be >= 1 (got {self.samples})")
        if self.temperature < 0:
            raise SageInputError(f"temperature must be >= 0 (got {self.temperature})")


@dataclass(frozen=True)
class RotConfig:
    enabled: bool = True  # write a Rule of Thumb for every answer
    max_new_tokens: int = 48


@dataclass(frozen=True)
class ParaScoreConfig:
    encoder: str | None = None  # default: the bundled all-MiniLM-L6-v2
    layers: int = 6


@dataclass(frozen=True)
class PipelineConfig:
    """Paraphrase -> answer -> RoT. The paraphrase stage's seed and batch size follow the run's
    (`seed`, `backend.batch_size`)."""

    model: ModelRole = ModelRole("smollm2-135m")  # the model under test
    paraphraser: ModelRole = ModelRole()  # default: the model under test
    rot_model: ModelRole = ModelRole()  # default: the paraphraser
    questions: str | None = None  # default: the built-in demo set
    paraphrase: ParaphraseConfig = ParaphraseConfig()
    parascore: ParaScoreConfig = ParaScoreConfig()
    answers: AnswerConfig = AnswerConfig()
    rots: RotConfig = RotConfig()
    backend: BackendOptions = BackendOptions()  # runtime options of every backend of the run
    executor: str = "local"  # where backends run: local (this process) or ray (a cluster)
    executor_options: ExecutorOptions = field(default_factory=ExecutorOptions)
    seed: int = 0
    out_dir: str = "sage-run"
    output: str = "responses.csv"
    cache_path: str | None = None  # default: <SAGE_CACHE_DIR>/generations.sqlite

    def paraphrase_stage(self) -> ParaphraseConfig:
        return replace(self.paraphrase, seed=self.seed, batch_size=self.backend.batch_size)

    @classmethod
    def flat(cls, **names) -> "PipelineConfig":
        return cls().with_flat(**names)

    def with_flat(self, **names) -> "PipelineConfig":
        """This config with settings given by their flat names (`FLAT_NAMES`) or top-level fields."""
        top = {f.name for f in fields(self)}
        nested: dict[str, dict[str, Any]] = {}
        direct = {}
        for name, value in names.items():
            if name in top and isinstance(value, type(getattr(self, name))):
                direct[name] = value  # a whole stage config (or role) given as such
            elif name in FLAT_NAMES:
                part, attr = FLAT_NAMES[name]
                if name == "min_parascore" and value is None:
                    continue  # None: the stage's default threshold
                nested.setdefault(part, {})[attr] = tuple(value) if name == "base_urls" else value
            elif name in top:
                direct[name] = value
            else:
                raise TypeError(f"unknown pipeline setting {name!r}")
        parts = {part: replace(getattr(self, part), **attrs) for part, attrs in nested.items()}
        return replace(self, **parts, **direct)


# The one-level config of earlier releases: name -> (stage config, its field).
FLAT_NAMES: dict[str, tuple[str, str]] = {
    "model": ("model", "name"), "paraphraser": ("paraphraser", "name"), "rot_model": ("rot_model", "name"),
    "backend": ("model", "backend"), "prompt_format": ("model", "prompt_format"),
    "paraphraser_backend": ("paraphraser", "backend"), "rot_backend": ("rot_model", "backend"),
    "rots": ("rots", "enabled"), "rot_max_new_tokens": ("rots", "max_new_tokens"),
    "k": ("paraphrase", "k"), "paraphrase_max_new_tokens": ("paraphrase", "max_new_tokens"),
    "paraphrase_temperature": ("paraphrase", "temperature"),
    "paraphrase_temperature_step": ("paraphrase", "temperature_step"), "min_parascore": ("paraphrase", "threshold"),
    "paraphrase_attempts": ("paraphrase", "max_attempts"), "paraphrase_requests": ("paraphrase", "requests_per_round"),
    "parascore_encoder": ("parascore", "encoder"), "parascore_layers": ("parascore", "layers"),
    "samples": ("answers", "samples"), "temperature": ("answers", "temperature"), "top_p": ("answers", "top_p"),
    "answer_max_new_tokens": ("answers", "max_new_tokens"), "record_logprobs": ("answers", "record_logprobs"),
    **{name: ("backend", name) for name in (
        "base_urls", "device", "dtype", "device_map", "batch_size", "concurrency", "max_retries", "timeout",
        "tensor_parallel_size", "enforce_eager", "kv_cache_gib", "extra")},
}


def default_run_dir(name: str) -> Path:
    """`runs/<name>` with every run of characters unsafe in a folder name replaced by `_`: where a
    generated run goes (`sage score --model`, `sage.score`) unless told otherwise."""
    return Path("runs") / re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("_")
