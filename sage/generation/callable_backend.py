"""`callable` backend: a user's Python function is the model (the SaGE library's `get_response`).

A function is registered under a name (`register_function`); `--backend callable` / `backend=
"callable"` with that name then answers a stage's requests by calling it with the stage's bare
inputs (`GenerationRequest.inputs`) instead of a prompt:

    answers:     fn(question) -> str                     batch: fn(questions) -> list[str]
    RoTs:        fn(question, answer) -> str             batch: fn(questions, answers) -> list[str]
    paraphrases: fn(question, n) -> str (numbered lines)  batch: fn(questions, ns) -> list[str]

Its identity, and so its generation-cache key, is the registered name: give a new name when the
function changes. A return value that is not a string (None, NaN) counts as an empty answer, which
scoring reports and counts like any other empty answer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from sage.api import Generation, GenerationBackend, GenerationRequest
from sage.errors import SageInputError
from sage.generation.base import BACKENDS, BackendOptions

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
class CallableBackend(GenerationBackend):
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

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        if not requests:
            return []
        args = []
        for r in requests:
            if not r.inputs:
                raise SageInputError(f"model {self._model_id!r} is a Python function: it answers the pipeline's "
                                     "stages (paraphrases, answers, RoTs), not free prompts")
            args.append([value for _, value in r.inputs])
        if self._entry.batch:
            outs = list(self._entry.fn(*[list(col) for col in zip(*args)]))
            if len(outs) != len(requests):
                raise SageInputError(f"model {self._model_id!r}: the batch function returned {len(outs)} texts for "
                                     f"{len(requests)} inputs; return one text per input, in order")
        else:
            outs = [self._entry.fn(*a) for a in args]
        return [Generation(text=self._text(o), finish_reason="stop") for o in outs]

    def _text(self, out) -> str:
        if isinstance(out, str):
            return out
        log.warning("model %r returned %r instead of a string; counted as an empty answer", self._model_id, out)
        return ""
