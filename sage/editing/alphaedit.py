"""AlphaEdit: the MEMIT update projected onto the null space of preserved-knowledge keys
(Fang et al., 2025). The projector comes from the key second moments: eigenvectors of C whose
eigenvalue is below `nullspace_threshold` x the largest one, so dW K0 ~ 0 for preserved keys.
It refuses an identity covariance (whose null space is empty).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from sage.editing import compute
from sage.editing.base import EDITORS, check
from sage.editing.memit import MemitEditor, MemitHParams
from sage.errors import SageInputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlphaEditHParams(MemitHParams):
    l2: float = 1.0
    nullspace_threshold: float = 1e-2

    def __post_init__(self):
        super().__post_init__()
        name = type(self).__name__
        check(self.covariance == "corpus", name,
              "AlphaEdit needs key statistics from a corpus (covariance='corpus'); an identity "
              "covariance has no null space to project onto")
        check(self.l2 > 0, name, "l2 must be > 0")
        check(0 < self.nullspace_threshold < 1, name, "nullspace_threshold must be in (0, 1)")


@EDITORS.register("alphaedit")
class AlphaEditEditor(MemitEditor):
    name = "alphaedit"
    supports_batch = True
    hparams_cls = AlphaEditHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._proj: dict[int, object] = {}

    def solve(self, K, R, cov, layer: int):
        if cov is None:
            raise SageInputError("AlphaEdit refuses an identity covariance; use covariance='corpus'")
        if layer not in self._proj:
            P, dim = compute.null_space_projector(cov, self.hparams.nullspace_threshold)
            if dim == 0:
                raise SageInputError(f"AlphaEdit: the key covariance of layer {layer} has no "
                                     "eigenvalue below the threshold; raise nullspace_threshold")
            log.info("AlphaEdit layer %d: null space of dimension %d", layer, dim)
            self._proj[layer] = P
        return compute.alphaedit_update(K, R, self._proj[layer].to(K.device), self.hparams.l2)
