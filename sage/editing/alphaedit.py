"""AlphaEdit: the MEMIT update projected onto the null space of preserved-knowledge keys
(Fang et al., 2025).

The projector is the reference construction: the SVD of the key second moment C (the same
statistics MEMIT uses), keeping the singular vectors whose singular value is below the absolute
`nullspace_threshold`; the update solves (P K K^T + l2 I) X = P K R^T (reference `L2` term), so
its rows lie in that null space and dW k0 ~ 0 for the preserved keys. How much of the preserved
keys' variance the kept directions still carry decides how close to zero: the dimension and that
share are logged and reported per layer in the run's summary.json (`editor`); the threshold was
chosen by that share (sage/editing/TUNING.md). It refuses an identity covariance (no null space).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from sage.editing import solvers
from sage.editing.base import EDITORS, check
from sage.editing.memit import MemitEditor, MemitHParams
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

    def diagnostics(self) -> dict:
        return {"null_space": {str(layer): ns.describe() for layer, ns in sorted(self._null.items())}}

    def solve(self, K, R, cov, layer: int):
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
        return solvers.alphaedit_update(K, R, self._null[layer].projector.to(K.device), self.hparams.l2)
