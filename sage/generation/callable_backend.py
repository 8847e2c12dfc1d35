"""`callable` backend: a user's Python function is the model (the SaGE library's `get_response`).

A function is registered under a name (`register_function`); `--backend callable` / `backend=
"callable"` with that name then answers a stage's requests by calling it with the stage's bare
inputs (`GenerationRequest.inputs`) instead of a prompt:

    answers:     fn(question) -> str                     batch: fn(questions) -> list[str]
    RoTs:        fn(question, answer) -> str             batch: fn(questions, answers) -> list[str]
    paraphrases: fn(question, n) -> str (numbered lines)  batch: fn(questions, ns) -> list[str]

Its identity, and so its generation-cache key, is the registered name: give a new name when the
function changes. None (or a float NaN) counts as an empty answer, which scoring reports and counts like
any other empty answer (a question left with fewer than two answers is listed as undefined); any other
value that is not a string is a `TypeError` naming the question. Each call's answer is stored as it
returns, so when the function raises, the calls that finished are kept and a rerun resumes after them.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from sage.api import Generation, GenerationRequest, StreamingBackend
from sage.errors import SageInputError
from sage.generation.backend_registry import BACKENDS, BackendOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Registered:
    fn: Callable
    batch: bool


_FUNCTIONS: dict[str, _Registered] = {}


def register_function(name: str, fn: Callable, *, batch: bool = False) -> str:
    """Make `fn` available as model `name` under the callable backend; returns the name."""
    if not name or not str(name).strip():
        raise SageInputError("a function needs a non-empty name (it keys the generation cache)")
    if not callable(fn):
        raise SageInputError(f"model {name!r}: {fn!r} is not callable; pass a function str -> str")
    _FUNCTIONS[name] = _Registered(fn, batch)
    return name


@BACKENDS.register("callable")
class CallableBackend(StreamingBackend):
    name = "callable"
    distributable = False  # stays on the driver under a cluster executor

    def __init__(self, model: str, options: BackendOptions | None = None):
        if model not in _FUNCTIONS:
            raise SageInputError(
                f"no Python function is registered as model {model!r}; call sage.score(questions, answer_fn, ...) "
                "or sage.generation.callable_backend.register_function(name, fn) first")
        self._model_id = model
        self._entry = _FUNCTIONS[model]

    @property
    def model_id(self) -> str:
        return self._model_id

    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        """Each answer as the function returns it, so the generation cache stores every finished
        call; an exception from the function reaches the caller unchanged, noting that a rerun
        resumes after the calls that finished."""
        if not requests:
            return
        args = []
        for r in requests:
            if not r.inputs:
                raise SageInputError(f"model {self._model_id!r} is a Python function: it answers the pipeline's "
                                     "stages (paraphrases, answers, RoTs), not free prompts")
            args.append([value for _, value in r.inputs])
        try:
            if self._entry.batch:
                outs = list(self._entry.fn(*[list(col) for col in zip(*args)]))
                if len(outs) != len(requests):
                    raise SageInputError(f"model {self._model_id!r}: the batch function returned {len(outs)} texts "
                                         f"for {len(requests)} inputs; return one text per input, in order")
                for i, (r, out) in enumerate(zip(requests, outs)):
                    yield i, Generation(text=self._text(out, r), finish_reason="stop")
            else:
                for i, (r, a) in enumerate(zip(requests, args)):
                    yield i, Generation(text=self._text(self._entry.fn(*a), r), finish_reason="stop")
        except SageInputError:
            raise
        except Exception as exc:
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(f"sage: the calls of model {self._model_id!r} that finished before this one are kept "
                             "(generation cache and records); run the same call again to resume after them")
            raise

    def _text(self, out, request: GenerationRequest) -> str:
        if isinstance(out, str):
            return out
        if out is None or (isinstance(out, float) and math.isnan(out)):
            log.warning("model %r returned %r for %s; counted as an empty answer", self._model_id, out,
                        _describe(request))
            return ""
        raise TypeError(f"model {self._model_id!r} returned {type(out).__name__} {out!r} for {_describe(request)}; "
                        "return a string (None counts as an empty answer)")


def _describe(request: GenerationRequest) -> str:
    return ", ".join(f"{name} {value!r}" for name, value in request.inputs)
