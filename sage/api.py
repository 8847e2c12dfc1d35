"""The small set of abstract bases every pluggable piece implements.

- `PairwiseSimilarity`: a text-pair similarity used as a baseline metric and as SGE edge weights.
- `GenerationBackend`: batched chat/completion generation (transformers, llama.cpp, vLLM, OpenAI).
- `Editor` / `EditHandle`: a knowledge-editing method and the handle that undoes it exactly.

Each kind has one registry (see `sage.registry.Registry`); adding a method is one module plus
one registry entry. Nothing here imports heavy libraries.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np


# --------------------------------------------------------------------------- similarities
class PairwiseSimilarity(ABC):
    """Similarity of every ordered pair of texts inside each group.

    `matrices(groups)` returns one n x n array per group with S[i, j] = sim(reference=i,
    candidate=j). Implementations see all groups at once so they can batch model work
    (every distinct text encoded once) instead of calling a model per pair.
    """

    name: str = ""
    symmetric: bool = True

    @classmethod
    def from_options(cls, options: Any) -> "PairwiseSimilarity":
        """Build from a run's model choices (`sage.metrics.similarity.SimilarityOptions`)."""
        return cls()

    @abstractmethod
    def matrices(self, groups: Sequence[Sequence[str]]) -> list[np.ndarray]: ...

    def describe(self) -> dict[str, Any]:
        """Configuration recorded next to results (model ids, layers, options)."""
        return {"name": self.name}

    def release(self) -> None:
        """Drop per-text caches (called between chunks of a run); models stay loaded."""
        return None


# --------------------------------------------------------------------------- generation
@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    logprobs: bool = False

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt. `messages` (chat) or `prompt` (plain completion); `sample` indexes repeats."""

    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # ((role, content), ...)
    params: SamplingParams = field(default_factory=SamplingParams)
    sample: int = 0


@dataclass
class Generation:
    text: str
    token_logprobs: list[float] | None = None
    finish_reason: str | None = None
    cached: bool = False


class GenerationBackend(ABC):
    """Batched generation. Implementations must be deterministic for a fixed seed and sample."""

    name: str = ""

    @property
    @abstractmethod
    def model_id(self) -> str: ...

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]: ...

    def close(self) -> None:  # release servers, engines, memory
        return None


# --------------------------------------------------------------------------- editing
@dataclass(frozen=True)
class TargetScore:
    """Teacher-forced view of one (prompt, target) pair under a scoring model.

    `token_acc`: share of target tokens that are the argmax given the prompt and the target prefix
    (EasyEdit's `rewrite_acc`); `exact`: every target token is the argmax, i.e. the greedy
    continuation equals the target; `logprob`: log-probability of the whole target sequence
    (`seq_prob` is its exponential); `argmax`: the argmax token id at each target position;
    `routed`: whether an editing wrapper intervened on this query (a GRACE codebook hit, a SERAC
    in-scope decision), None where the scoring model has no such decision.
    """

    token_acc: float
    exact: bool
    logprob: float
    argmax: tuple[int, ...]
    routed: bool | None = None

    @property
    def seq_prob(self) -> float:
        return math.exp(self.logprob)


class TargetScorer(ABC):
    """What editing metrics query: an edited model, or a wrapper (in-context, memory, adapter)."""

    @abstractmethod
    def score(self, prompts: Sequence[str], targets: Sequence[str]) -> list[TargetScore]: ...

    #: False where generation through this scoring model is not implemented (studies refuse it).
    can_generate: bool = True

    def condition_prompts(self, prompts: Sequence[str]) -> list[str]:
        """What the underlying language model sees when this scoring model answers `prompts`:
        the prompts themselves for an edited model; a wrapper adds its edit context. Studies
        generate free text through this, so wrappers stay in the generation path too."""
        return list(prompts)


class EditHandle(ABC):
    """What `Editor.apply` returns. `restore()` puts the original weights back bit for bit."""

    @abstractmethod
    def restore(self) -> None: ...

    @abstractmethod
    def scoring_model(self) -> TargetScorer:
        """The object to score after the edit: the edited model, or a wrapper around it."""


class Editor(ABC):
    """A knowledge-editing method. `model` is a loaded model with `.model` and `.tokenizer`;
    `requests` are `sage.editing.dataset.EditRequest`s (one, or many where `supports_batch`)."""

    name: str = ""
    supports_batch: bool = False

    @abstractmethod
    def apply(self, model: Any, requests: Sequence[Any]) -> EditHandle: ...
