"""MEMIT: many edits at once, the residual change spread over several MLP layers (Meng et al., 2023).

For each request a vector is optimized (`value_optimization.optimize_deltas`, many per pass) at
the last edited layer; the target residual z_i = current residual + delta_i. Then, layer by
layer, the remaining residual gap is divided by the number of layers left and written into that
layer's down-projection with the covariance-regularized least-squares solver. AlphaEdit
(alphaedit.py) reuses this loop with the null-space projected solver.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing import solvers
from sage.editing.editor_base import EDITORS, check
from sage.editing.capture import subject_activations
from sage.editing.handles import WeightEditHandle
from sage.editing.locate_then_edit import LocateThenEditEditor, ValueOptHParams
from sage.editing.target_scoring import LMScorer
from sage.editing.value_optimization import optimize_deltas

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemitHParams(ValueOptHParams):
    layers: tuple[int, ...] = (3, 4, 5, 6)  # see sage/editing/TUNING.md
    cov_weight: float = 1000.0  # lambda (mom2_update_weight) in (lambda C + K K^T), C the per-token mean; TUNING.md

    def __post_init__(self):
        super().__post_init__()
        name = type(self).__name__
        check(len(self.layers) >= 1, name, "layers must name at least one layer")
        check(self.cov_weight >= 0, name, "cov_weight must be >= 0")


@EDITORS.register("memit")
class MemitEditor(LocateThenEditEditor):
    name = "memit"
    supports_batch = True
    hparams_cls = MemitHParams

    def solve(self, K, R, cov, layer: int):
        """Weight change for one layer; K [key_dim, N], R [value_dim, N]."""
        import torch

        if cov is None:
            cov = torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
        return solvers.memit_update(K, R, cov.to(K.device), self.hparams.cov_weight)

    def edit_layers(self, model: Any) -> list[int]:
        return sorted(set(self.locate(model, self.hparams.layers)[1]))

    def apply(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile, _ = self.locate(model, hp.layers)
        layers = self.edit_layers(model)
        last = layers[-1]
        covs = self.covariances(lm, layers)
        contexts = self.contexts(lm)
        with self.undo_on_error(self.mlp_snapshot(model, profile, layers)) as snapshot:
            torch.manual_seed(hp.seed)
            deltas = optimize_deltas(model, tok, profile, last, requests, contexts,
                                     hp.delta_settings(), progress=len(requests) > 1)
            for i, layer in enumerate(layers):
                # this layer's keys and the last layer's output, from the same forward passes
                K, cur = subject_activations(
                    model, tok, requests, contexts,
                    [(profile.mlp_module(model, layer), False), (profile.layer_module(model, last), True)])
                K = K.T
                if i == 0:  # the target residual, from the unedited model
                    z = cur + deltas
                R = (z - cur).T / (len(layers) - i)
                dW = self.solve(K.double(), R.double(), covs[layer], layer)
                weight = profile.mlp_module(model, layer).weight
                with torch.no_grad():
                    weight.add_((dW.T if profile.conv1d else dW).to(weight.dtype))
                log.debug("layer %d: residual gap %.3f", layer, float(R.norm()))
        return WeightEditHandle(snapshot, LMScorer(model, tok), {"layers": layers,
                                                                 "n_edits": len(requests)})
