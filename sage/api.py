"""The small set of abstract bases every pluggable piece implements.

- `PairwiseSimilarity`: a text-pair similarity used as a baseline metric and as SGE edge weights.
- `GenerationBackend`: batched chat/completion generation (transformers, llama.cpp, vLLM, OpenAI).
- `Editor` / `EditHandle`: a knowledge-editing method and the handle that undoes it exactly.
- `Executor` / `WorkerPool`: where work runs (this process, a Ray cluster); the work is handed to
  it as a picklable worker factory and units, so executors import no generation or editing code.

Each kind has one registry (see `sage.registry.Registry`); adding a method is one module plus
one registry entry. Nothing here imports heavy libraries.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np


# --------------------------------------------------------------------------- similarities
class PairwiseSimilarity(ABC):
    """Similarity of every ordered pair of texts inside each group.

    `matrices(groups)` returns one n x n array per group with S[i, j] = sim(reference=i,
    candidate=j). Implementations see all groups at once so they can batch model work
    (every distinct text encoded once) instead of calling a model per pair. `contexts`, when
    given, holds the question each group answers (None where unknown); only similarities that
    judge answers *to a question* (the LLM judge) read it.

    Similarities that judge equivalence of meaning (NLI, LLM judge) also give `relations`:
    per group, which node entails which, and the directional values behind it.
    """

    name: str = ""
    symmetric: bool = True
    judges_equivalence: bool = False  # True where `relations` is implemented

    @classmethod
    def from_options(cls, options: Any) -> "PairwiseSimilarity":
        """Build from a run's model choices (`sage.metrics.similarity.SimilarityOptions`)."""
        return cls()

    @abstractmethod
    def matrices(self, groups: Sequence[Sequence[str]],
                 contexts: Sequence[str | None] | None = None) -> list[np.ndarray]: ...

    def relations(self, groups: Sequence[Sequence[str]],
                  contexts: Sequence[str | None] | None = None) -> list["EntailmentRelations"] | None:
        """Directional entailment per group (None for similarities that do not judge it)."""
        return None

    def describe(self) -> dict[str, Any]:
        """Configuration recorded next to results (model ids, layers, options)."""
        return {"name": self.name}

    def release(self) -> None:
        """Drop per-text caches (called between chunks of a run); models stay loaded."""
        return None

    def warnings(self) -> list[str]:
        """Anything a reader of the results must know (e.g. an approximation that was used)."""
        return []


@dataclass
class EntailmentRelations:
    """One group's directional judgments: `entails[i, j]` says node i entails node j (NLI: the
    most probable label for premise i, hypothesis j is entailment; judge: P(yes) > 0.5 with i shown
    first). `labels[i, j]` is the 3-way label (`sage.metrics.semantic_entropy`: 0 entailment,
    1 neutral, 2 contradiction; a binary judge gives 0 or 2); `agrees[i, j]` says
    P(entailment) > P(contradiction) (LM-Polygraph's NumSemSets edge). Both default to what
    `entails` implies. `values` holds the directional numbers behind them (name -> n x n)."""

    entails: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)
    labels: np.ndarray | None = None
    agrees: np.ndarray | None = None

    def __post_init__(self):
        if self.labels is None:
            self.labels = np.where(self.entails, 0, 2)
        if self.agrees is None:
            self.agrees = np.asarray(self.entails, dtype=bool)


# --------------------------------------------------------------------------- generation
@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    # Log-probabilities wanted for these strings at the first generated position (each string's
    # first token as tokenized right after the prompt; see `Generation.candidate_logprobs`).
    candidates: tuple[str, ...] = ()

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")

    @property
    def samples_model_distribution(self) -> bool:
        """Greedy, or temperature 1 without top-p: tokens come from the model's own softmax."""
        return self.top_p >= 1.0 and self.temperature in (0.0, 1.0)


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt. `messages` (chat) or `prompt` (plain completion); `sample` indexes repeats.

    `inputs` names what a pipeline stage asks about, bare (("question", q),) for answers,
    (("question", q), ("answer", a)) for RoTs: backends that take inputs rather than prompts (a
    user's Python function, `backend="callable"`) read these; the others ignore them."""

    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # ((role, content), ...)
    params: SamplingParams = field(default_factory=SamplingParams)
    sample: int = 0
    inputs: tuple[tuple[str, str], ...] = ()


@dataclass
class Generation:
    """`candidate_logprobs`: for each of `SamplingParams.candidates`, the log-probability that the
    first generated token is the token that starts that string right after the prompt (over the
    whole vocabulary on transformers and llama.cpp; from the top-20 list on vLLM and the
    OpenAI-compatible backend, which matches token texts, -inf when not listed); None when the
    backend returned no log-probabilities.

    `token_logprobs` are each generated token's log-probability under the model (log-softmax of
    its logits); `sampled_logprobs` under the distribution the token was drawn from (logits
    divided by the temperature, top-p truncated and renormalised; the model's own when greedy),
    as semantic entropy's reference records them. Backends that report only one of them leave
    `sampled_logprobs` None (`GenerationBackend.reports_sampled_logprobs`).

    `error`: set when the request got no answer although the server replied (a server that refused
    this one prompt, such as HTTP 400 over the context length, or an answer with null content); the
    text is then empty, the generation cache does not store it, and the pipeline counts it as a
    failed answer (an empty answer, listed in the run's warnings)."""

    text: str
    token_logprobs: list[float] | None = None
    finish_reason: str | None = None
    cached: bool = False
    candidate_logprobs: dict[str, float] | None = None
    sampled_logprobs: list[float] | None = None
    error: str | None = None


class GenerationBackend(ABC):
    """Batched generation. Implementations must be deterministic for a fixed seed and sample."""

    name: str = ""
    reports_sampled_logprobs: bool = False  # fills Generation.sampled_logprobs when logprobs are asked for
    #: False for backends that stay on the driver under a cluster executor (a network client, a
    #: Python function of the driver's process); True where workers can each hold a copy.
    distributable: bool = True
    #: Workers generating at once (a cluster backend's pool size); callers size their batches by it.
    parallelism: int = 1

    @property
    @abstractmethod
    def model_id(self) -> str: ...

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]: ...

    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        """Yield (request index, generation) as results become available, in any order.

        Callers that write results as they arrive (the generation cache, the record store) use this,
        so work finished before a crash is kept. The default generates everything in one call."""
        yield from enumerate(self.generate(requests))

    def identity(self) -> dict[str, Any]:
        """Everything besides the request that decides the output; the generation cache keys on it.

        The default names the backend and the model; backends that load weights add a fingerprint
        of them (`sage.models.identity.fingerprint`), the dtype and the chat template."""
        return {"backend": self.name, "model": self.model_id}

    def close(self) -> None:  # release servers, engines, memory
        return None


class StreamingBackend(GenerationBackend):
    """A backend that yields each generation as it finishes (`generate_iter`); `generate` collects them."""

    @abstractmethod
    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]: ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        out: list[Generation | None] = [None] * len(requests)
        for i, gen in self.generate_iter(requests):
            out[i] = gen
        return out  # type: ignore[return-value]


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

    #: False where studies cannot sample text through this scoring model with one generation backend
    #: (they refuse it); the editing measures' greedy generation may still go through the wrapper's
    #: own `continue_greedily(prompts, max_new, decided)` (`sage.editing.generation_measures`).
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

    def edited_parameters(self) -> tuple[str, ...]:
        """Names of the model parameters this edit wrote (none for wrappers): what a sequential
        run's checkpoint saves."""
        return ()


class Editor(ABC):
    """A knowledge-editing method. `model` is a loaded model with `.model` and `.tokenizer`;
    `requests` are `sage.editing.dataset.EditRequest`s (one, or many where `supports_batch`)."""

    name: str = ""
    supports_batch: bool = False
    #: True where edits can be applied one after another to one model that is never restored in
    #: between (`sage edit --sequential`); see `sage.editing.editor_base.EditorBase` for the hooks.
    supports_sequential: bool = False
    #: False where studies cannot sample free text through the handle's scoring model (it needs
    #: more than one generation backend, or an adapter a backend would bypass); studies refuse
    #: such a method up front, before any text is generated or any edit is made. The editing
    #: measures' greedy generation goes through the scoring model either way.
    can_generate: bool = True

    @abstractmethod
    def apply(self, model: Any, requests: Sequence[Any]) -> EditHandle: ...


# --------------------------------------------------------------------------- executors
class WorkerPool(ABC):
    """Workers built once each by a picklable factory (one holds a loaded model or a backend);
    `map(units)` runs `worker.run(unit)` for every unit and yields (index, result) as each
    finishes, in any order; `call_all(name, *args)` calls a method on every worker."""

    size: int = 1

    @abstractmethod
    def map(self, units: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        ...

    @abstractmethod
    def call_all(self, name: str, *args) -> list:
        ...


class Executor(ABC):
    """Where units of work run. Units must be pure: running one twice (a retry after a lost
    worker) gives the same result, and only the caller writes results, so a run killed at any
    point resumes from what was written and a retry never duplicates a record.

    `distributes`: False for an executor whose workers live in this process (`local`); callers
    then build what they need directly instead of through a pool."""

    name: str = ""
    distributes: bool = False

    @abstractmethod
    def pool(self, factory, *, gpus: float | None = None, key: str | None = None) -> WorkerPool:
        """The pool built by `factory` under `key` (kept and reused by later calls with the same
        key: a model is loaded once per worker); `gpus` overrides the GPUs each worker reserves."""

    def map(self, factory, units: Sequence[Any], *, gpus: float | None = None,
            key: str | None = None) -> Iterator[tuple[int, Any]]:
        """`pool(factory).map(units)`; a pool without a key is dropped when the units are done."""
        pool = self.pool(factory, gpus=gpus, key=key)
        try:
            yield from pool.map(units)
        finally:
            if key is None:
                self.drop(pool)

    def release(self, key: str) -> None:
        """Drop the workers built under `key` (their memory, or their cluster resources)."""
        return

    def drop(self, pool: WorkerPool) -> None:
        """Drop a pool built without a key."""
        return

    def workers(self, gpus: float | None = None) -> int:
        """How many units run at once."""
        return 1

    def close(self) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
