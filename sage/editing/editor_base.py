"""Typed hyperparameters, the editor registry and the context editors receive.

Each method module defines one frozen `HParams` dataclass (validated in `__post_init__`) and one
`Editor` subclass registered with `@EDITORS.register("name")`. The registry imports method modules
lazily, so `import sage.editing` stays light.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from sage.api import Editor
from sage.editing.handles import WeightSnapshot, WrapperHandle, truncate_to
from sage.editing.profiles import profile_for
from sage.errors import SageInputError
from sage.registry import Registry

EDITORS: Registry[type] = Registry("editing method", lazy_modules={
    "ft-l": "sage.editing.ft",
    "ft-m": "sage.editing.ft",
    "lora": "sage.editing.lora",
    "rome": "sage.editing.rome",
    "memit": "sage.editing.memit",
    "alphaedit": "sage.editing.alphaedit",
    "ike": "sage.editing.ike",
    "serac": "sage.editing.serac",
    "serac-icl": "sage.editing.serac_icl",
    "grace": "sage.editing.grace",
})


def check(cond: bool, cls: str, msg: str) -> None:
    if not cond:
        raise SageInputError(f"{cls} hyperparameters: {msg}")


@dataclass(frozen=True)
class HParams:
    """Base of every method's hyperparameters. Subclasses validate in `__post_init__`."""

    seed: int = 0

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any] | None = None):
        overrides = dict(overrides or {})
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            raise SageInputError(f"{cls.__name__}: unknown hyperparameter(s) {unknown}; "
                                 f"known: {', '.join(sorted(names))}")
        for k, v in list(overrides.items()):
            if isinstance(v, list):
                overrides[k] = tuple(v)
        return cls(**overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_batch_mode(method: str, batch: bool) -> None:
    """Refuse batch mode for a method that edits one entry at a time: one line, before anything runs."""
    if batch and not EDITORS.get(method).supports_batch:
        raise SageInputError(f"method {method!r} does not batch; use --method {method} (without :batch)")


def check_sequential(method: str) -> None:
    """Refuse a method that cannot edit sequentially: one line, before anything is spent."""
    if not EDITORS.get(method).supports_sequential:
        raise SageInputError(f"method {method!r} cannot edit sequentially (its edits are not made on top of "
                             "one another); leave it out of --sequential")


def resolve_layer(layer: int, n_layers: int, what: str = "layer") -> int:
    """Negative layers count from the end; out-of-range layers raise one clear line."""
    idx = layer + n_layers if layer < 0 else layer
    if not 0 <= idx < n_layers:
        raise SageInputError(f"{what} {layer} is out of range for a model with {n_layers} layers")
    return idx


@dataclass
class EditContext:
    """What an editor may use besides the model: the dataset pool (for retrieval-based methods,
    never containing the entry under test at scoring time) and runtime settings."""

    pool: Sequence[Any] = ()
    held_out: Sequence[Any] = ()  # other frameworks' entries: training data for SERAC
    device: str = "cpu"
    corpus: str | None = None  # a user text file for covariance statistics
    extra: dict[str, Any] = field(default_factory=dict)


class EditorBase(Editor):
    hparams_cls: type[HParams] = HParams
    # Which parts of `EditContext` the method reads: only those are loaded (and their files checked
    # before any model loads), so a run needs the other frameworks' files only when it uses them.
    uses_pool: bool = False
    uses_held_out: bool = False

    def __init__(self, hparams: HParams | None = None, context: EditContext | None = None):
        self.hparams = hparams if hparams is not None else self.hparams_cls()
        if not isinstance(self.hparams, self.hparams_cls):
            raise TypeError(f"{self.name} expects {self.hparams_cls.__name__}")
        self.context = context or EditContext()

    @staticmethod
    def locate(model: Any, layers: Sequence[int]):
        """The model's profile and `layers` resolved against its depth (negative = from the end)."""

        profile = profile_for(model)
        n = profile.n_layers(model)
        return profile, [resolve_layer(layer, n) for layer in layers]

    @staticmethod
    def mlp_snapshot(model: Any, profile: Any, layers: Sequence[int]):
        """A copy of the down-projection weights of `layers`, to restore bit for bit."""

        return WeightSnapshot(model, [f"{profile.mlp_out.format(layer)}.weight" for layer in layers])

    @staticmethod
    @contextlib.contextmanager
    def undo_on_error(undo: Any):
        """Yields `undo` (anything with `restore()`); restores it if the edit fails part way, so a
        failed or interrupted edit never leaves the model changed."""
        try:
            yield undo
        except BaseException:
            undo.restore()
            raise

    def diagnostics(self) -> dict[str, Any]:
        """What the editor measured about itself (null-space dimensions, classifier accuracy);
        the runner stores it per framework in summary.json."""
        return {}

    # ------------------------------------------------------------------ sequential editing
    # `sage.editing.sequential` applies edits one after another to one model, never restoring in
    # between; a method that can do so sets `supports_sequential` and, where the defaults below
    # do not fit, overrides these hooks.

    def start_sequence(self, lm: Any, sequence: Sequence[Any]) -> None:
        """Called once on the unedited model before the first edit of a sequence of
        `sequence` (every request it will edit, in order), and again, in a new process, before a
        resumed sequence loads its checkpoint: compute here what the method derives from the
        unedited model (key statistics, context prefixes, trained parts), so a resumed sequence
        edits exactly as an uninterrupted one."""

    def apply_next(self, lm: Any, requests: Sequence[Any]):
        """Apply `requests` on top of every edit made so far (the model as it stands); the
        handle's scoring model answers for all edits so far and `restore()` undoes this edit
        only (handles restored in reverse order give back the original weights bit for bit).
        Default: `apply` on the current weights."""
        return self.apply(lm, requests)

    def sequence_state(self) -> dict[str, Any]:
        """What the method itself holds about the edits so far (tensors and JSON values: a
        codebook, a memory, earlier keys), saved at a sequence's checkpoints; the runner saves the
        edited weights itself. Default: nothing."""
        return {}

    def load_sequence_state(self, lm: Any, state: dict[str, Any], requests: dict[str, Any]):
        """Rebuild `sequence_state()` in a resumed sequence (`requests`: the sequence's requests
        by uid); returns a handle that undoes it (its scoring model answers for every edit so
        far), or None when the method holds nothing."""
        return None


class MemoryEdits:
    """Sequential editing for methods whose edits are a memory of requests (IKE, SERAC,
    SERAC-ICL): each edit appends its requests, its handle cuts the memory back, the
    checkpointed state is the memory's uids. The class defines `memory_scorer(lm)`, the scoring
    model over the memory as it stands, and resets `self._memory` in `start_sequence`."""

    _memory: list

    def memory_scorer(self, lm: Any):
        raise NotImplementedError

    def apply_next(self, lm: Any, requests: Sequence[Any]):
        undo = truncate_to(self._memory, len(self._memory))
        self._memory += list(requests)
        try:
            scorer = self.memory_scorer(lm)
        except BaseException:
            undo()
            raise
        return WrapperHandle(scorer, undo, {"memory": len(self._memory)})

    def sequence_state(self) -> dict[str, Any]:
        return {"memory": [r.uid for r in self._memory]}

    def load_sequence_state(self, lm: Any, state: dict[str, Any], requests: dict[str, Any]):
        self._memory = [requests[uid] for uid in state.get("memory", [])]
        if not self._memory:
            return None
        return WrapperHandle(self.memory_scorer(lm), self._memory.clear, {"memory": len(self._memory)})


def make_editor(name: str, overrides: dict[str, Any] | None = None,
                context: EditContext | None = None) -> EditorBase:
    cls = EDITORS.get(name)
    return cls(cls.hparams_cls.from_overrides(overrides), context)
