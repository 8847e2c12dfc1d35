"""AlphaEdit: the MEMIT update projected onto the null space of preserved-knowledge keys
(Fang et al., 2025).

The projector is the reference construction: the SVD of the key second moment C (the same
statistics MEMIT uses), keeping the singular vectors whose singular value is below the absolute
`nullspace_threshold`; the update solves (P K K^T + l2 I) X = P K R^T (reference `L2` term), so
its rows lie in that null space and dW k0 ~ 0 for the preserved keys. How much of the preserved
keys' variance the kept directions still carry decides how close to zero: the dimension and that
share are logged and reported per layer in the run's summary.json (`editor`); the threshold was
chosen by that share (sage/editing/TUNING.md). It refuses an identity covariance (no null space).

Sequential editing (`sage edit --sequential`). The paper's sequential algorithm keeps the keys
K_p of the edits made so far, and the reference code (`AlphaEdit_main.py`, `cache_c`) adds
K_p K_p^T to the normal equations, (P (K_p K_p^T + K K^T) + l2 I) X = P K R^T with P fixed: a
least-squares penalty on disturbing earlier edits. Ours makes it a constraint instead: the
projector of each edit also excludes the span of the earlier edits' keys at that layer (the keys
each earlier edit solved with, kept per layer), P_t = P - Q Q^T with Q an orthonormal basis of
P K_p (`solvers.exclude_keys`), so K_p^T P_t = 0 and the new update leaves the earlier edits'
keys' outputs unchanged at the edited layers (to float64 rounding; tested). With P_t K_p = 0 the
reference's K_p K_p^T term would vanish, so it is not added. Each edit removes up to one
dimension per request and layer from the null space; its remaining dimension per layer is in
`diagnostics()["sequence_null_dim"]`, and an edit whose null space is used up writes nothing
(logged).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing import solvers
from sage.editing.editor_base import EDITORS, check
from sage.editing.handles import WeightEditHandle, WrapperHandle
from sage.editing.memit import MemitEditor, MemitHParams
from sage.editing.target_scoring import LMScorer
from sage.errors import SageInputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlphaEditHParams(MemitHParams):
    l2: float = 10.0  # the reference L2 (AlphaEdit hparams, every model)
    nullspace_threshold: float = 2e-2  # absolute singular-value threshold; see TUNING.md

    def __post_init__(self):
        super().__post_init__()
        name = type(self).__name__
        check(self.covariance == "corpus", name,
              "AlphaEdit needs key statistics from a corpus (covariance='corpus'); an identity "
              "covariance has no null space to project onto")
        check(self.l2 > 0, name, "l2 must be > 0")
        check(self.nullspace_threshold > 0, name, "nullspace_threshold must be > 0")


@EDITORS.register("alphaedit")
class AlphaEditEditor(MemitEditor):
    name = "alphaedit"
    supports_batch = True
    hparams_cls = AlphaEditHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._null: dict[int, solvers.NullSpace] = {}
        self._earlier: dict[int, list] = {}  # sequential: per layer, the keys earlier edits solved with
        self._in_sequence = False  # set while `apply_next` runs
        self._sequence_dims: dict[int, int] = {}

    def diagnostics(self) -> dict:
        out = {"null_space": {str(layer): ns.describe() for layer, ns in sorted(self._null.items())}}
        if self._sequence_dims:
            out["sequence_null_dim"] = {str(layer): d for layer, d in sorted(self._sequence_dims.items())}
        return out

    def projector(self, layer: int):
        """The projector the next update at `layer` uses: the null space of the key statistics,
        less the span of the earlier edits' keys in a sequence (float64)."""
        P = self._null[layer].projector
        earlier = self._earlier.get(layer)
        if not earlier:
            return P
        import torch

        return solvers.exclude_keys(P, torch.cat(earlier, dim=1))

    # ------------------------------------------------------------------ sequential
    def start_sequence(self, lm: Any, sequence: Sequence[Any]) -> None:
        super().start_sequence(lm, sequence)
        layers = self.edit_layers(lm.model)
        covs = self.covariances(lm, layers)
        for layer in layers:
            self._null_space(layer, covs[layer])
        self._earlier = {layer: [] for layer in layers}

    def apply_next(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        counts = {layer: len(keys) for layer, keys in self._earlier.items()}
        self._in_sequence = True
        try:
            handle = self.apply(lm, requests)
        except BaseException:
            self._forget(counts)
            raise
        finally:
            self._in_sequence = False
        return WeightEditHandle(_SequenceUndo(handle, lambda: self._forget(counts)), handle.scoring_model(),
                                handle.info)

    def _forget(self, counts: dict[int, int]) -> None:
        for layer, n in counts.items():
            del self._earlier[layer][n:]

    def sequence_state(self) -> dict:
        return {f"keys.{layer}.{i}": k for layer, keys in self._earlier.items() for i, k in enumerate(keys)}

    def load_sequence_state(self, lm: Any, state: dict, requests: dict):
        for layer in self._earlier:
            n = sum(1 for name in state if name.startswith(f"keys.{layer}."))
            self._earlier[layer] = [state[f"keys.{layer}.{i}"].double() for i in range(n)]
        counts = {layer: 0 for layer in self._earlier}
        return WrapperHandle(LMScorer(lm.model, lm.tokenizer), lambda: self._forget(counts))

    # ------------------------------------------------------------------ the update
    def _null_space(self, layer: int, cov) -> solvers.NullSpace:
        if cov is None:
            raise SageInputError("AlphaEdit refuses an identity covariance; use covariance='corpus'")
        if layer not in self._null:
            ns = solvers.null_space(cov, self.hparams.nullspace_threshold)
            if ns.dim == 0:
                raise SageInputError(f"AlphaEdit: the key statistics of layer {layer} have no "
                                     "singular value below the threshold; raise nullspace_threshold")
            log.info("AlphaEdit layer %d: null space of dimension %d holding %.2e of the keys' "
                     "variance", layer, ns.dim, ns.variance_share)
            self._null[layer] = ns
        return self._null[layer]

    def solve(self, K, R, cov, layer: int):
        self._null_space(layer, cov)
        if not self._in_sequence:
            return solvers.alphaedit_update(K, R, self._null[layer].projector.to(K.device), self.hparams.l2)
        P = self.projector(layer)
        dim = int(round(float(P.trace())))
        self._sequence_dims[layer] = dim
        if dim == 0:
            log.warning("AlphaEdit layer %d: the earlier edits' keys use up the null space; this edit "
                        "writes nothing there", layer)
        self._earlier[layer].append(K.detach().double().cpu())
        return solvers.alphaedit_update(K, R, P.to(K.device), self.hparams.l2)


class _SequenceUndo:
    """Restores an edit's weights, then forgets the keys it added (a sequence's undo of one edit)."""

    def __init__(self, handle, forget):
        self.handle, self.forget = handle, forget
        self.names = handle.edited_parameters()

    def restore(self) -> None:
        self.handle.restore()
        self.forget()
