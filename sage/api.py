"""The small set of abstract bases every pluggable piece implements.

- `PairwiseSimilarity`: a text-pair similarity used as a baseline metric and as SGE edge weights.
- `GenerationBackend`: batched chat/completion generation (transformers, llama.cpp, vLLM, OpenAI).
- `Editor` / `EditHandle`: a knowledge-editing method and the handle that undoes it exactly.

Each kind has one registry (see `sage.registry.Registry`); adding a method is one module plus
one registry entry. Nothing here imports heavy libraries.
"""
from __future__ import annotations

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

    @abstractmethod
    def matrices(self, groups: Sequence[Sequence[str]]) -> list[np.ndarray]: ...

    def describe(self) -> dict[str, Any]:
        """Configuration recorded next to results (model ids, layers, options)."""
        return {"name": self.name}


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
class EditHandle(ABC):
    """What `Editor.apply` returns. `restore()` puts the original weights back bit for bit."""

    @abstractmethod
    def restore(self) -> None: ...

    def scoring_model(self) -> Any:
        """The object to score after the edit: the edited model, or a wrapper around it."""
        raise NotImplementedError


class Editor(ABC):
    name: str = ""
    supports_batch: bool = False

    @abstractmethod
    def apply(self, model: Any, requests: Sequence[Any]) -> EditHandle: ...
