"""MEMIT: many edits at once, the residual change spread over several MLP layers (Meng et al., 2023).

For each request a vector is optimized (shared `compute.optimize_deltas`, many per pass) at the last edited layer;
the target residual z_i = current residual + delta_i. Then, layer by layer, the remaining residual
gap is divided by the number of layers left and written into that layer's down-projection with the
covariance-regularized least-squares solver. AlphaEdit (alphaedit.py) reuses this loop with the
null-space projected solver.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing import compute
from sage.editing.base import EDITORS, EditorBase, HParams, check, resolve_layer
from sage.editing.handles import WeightEditHandle, WeightSnapshot
from sage.editing.profiles import profile_for
from sage.editing.rome import layer_covariances
from sage.editing.scorer import LMScorer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemitHParams(HParams):
    layers: tuple[int, ...] = (3, 4, 5, 6)  # see sage/editing/TUNING.md
    n_context: int = 2
    context_length: int = 10
    v_steps: int = 25
    v_lr: float = 1.0
    kl_factor: float = 0.0625
    weight_decay: float = 0.5
    clamp_norm_factor: float = 8.0
    cov_weight: float = 100.0  # lambda in (lambda C + K K^T); C is the per-token mean
    covariance: str = "corpus"
    stats_tokens: int = 0
    v_stop_nll: float = 0.05  # a request's value optimization stops below this target NLL
    v_batch: int = 16  # requests whose value vectors are optimized in one forward/backward pass

    def __post_init__(self):
        name = type(self).__name__
        check(self.v_stop_nll >= 0 and self.v_batch >= 1, name, "v_stop_nll >= 0 and v_batch >= 1")
        check(len(self.layers) >= 1, name, "layers must name at least one layer")
        check(self.v_steps >= 1 and self.v_lr > 0, name, "v_steps >= 1 and v_lr > 0")
        check(self.kl_factor >= 0 and self.weight_decay >= 0, name, "kl_factor, weight_decay >= 0")
        check(self.clamp_norm_factor > 0, name, "clamp_norm_factor must be > 0")
        check(self.cov_weight >= 0, name, "cov_weight must be >= 0")
        check(self.covariance in ("corpus", "identity"), name,
              f"covariance must be 'corpus' or 'identity', got {self.covariance!r}")
        check(self.stats_tokens >= 0, name, "stats_tokens must be >= 0 (0 = automatic)")

    def delta_settings(self) -> compute.DeltaSettings:
        return compute.DeltaSettings(self.v_steps, self.v_lr, self.kl_factor, self.weight_decay,
                                     self.clamp_norm_factor, self.v_stop_nll, self.v_batch)


@EDITORS.register("memit")
class MemitEditor(EditorBase):
    name = "memit"
    supports_batch = True
    hparams_cls = MemitHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._cov: dict = {}

    def solve(self, K, R, cov, layer: int):
        """Weight change for one layer; K [key_dim, N], R [value_dim, N]."""
        import torch

        if cov is None:
            cov = torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
        return compute.memit_update(K, R, cov.to(K.device), self.hparams.cov_weight)

    def apply(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile = profile_for(model)
        n = profile.n_layers(model)
        layers = sorted({resolve_layer(layer, n) for layer in hp.layers})
        last = layers[-1]
        covs = ({layer: None for layer in layers} if hp.covariance == "identity"
                else layer_covariances(self, lm, layers, hp.stats_tokens, self._cov))
        contexts = compute.context_templates(model, tok, hp.n_context, hp.context_length, hp.seed)
        snapshot = WeightSnapshot(model, [f"{profile.mlp_out.format(layer)}.weight" for layer in layers])
        try:
            torch.manual_seed(hp.seed)
            deltas = compute.optimize_deltas(model, tok, profile, last, requests, contexts,
                                             hp.delta_settings(), progress=len(requests) > 1)
            for i, layer in enumerate(layers):
                # this layer's keys and the last layer's output, from the same forward passes
                K, cur = compute.subject_activations(
                    model, tok, requests, contexts,
                    [(profile.mlp_module(model, layer), False), (profile.layer_module(model, last), True)])
                K = K.T
                if i == 0:  # the target residual, from the unedited model
                    z = cur + deltas
                R = (z - cur).T / (len(layers) - i)
                dW = self.solve(K.double(), R.double(), covs[layer], layer)
                module = profile.mlp_module(model, layer)
                with torch.no_grad():
                    module.weight.add_((dW.T if profile.conv1d else dW).to(module.weight.dtype))
                log.debug("layer %d: residual gap %.3f", layer, float(R.norm()))
        except BaseException:
            snapshot.restore()
            raise
        return WeightEditHandle(snapshot, LMScorer(model, tok), {"layers": layers,
                                                                 "n_edits": len(requests)})
