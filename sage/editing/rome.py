"""ROME: a rank-one update of one MLP down-projection (Meng et al., 2022) with the R-ROME correction.

The key is the subject's last-token input to the down-projection averaged over model-generated
context prefixes, and that same averaged key is used in the update (R-ROME: using the unaveraged
prompt key there makes the update unstable). The value is optimized with the target NLL, a KL term
on "<subject> is a" (at the subject's last token, KL(current || initial), as the reference) and
weight decay. `covariance="identity"` is allowed, with a warning.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing import compute
from sage.editing.base import EDITORS, EditorBase, HParams, check, resolve_layer
from sage.editing.handles import WeightEditHandle, WeightSnapshot
from sage.editing.profiles import profile_for
from sage.editing.scorer import LMScorer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RomeHParams(HParams):
    # Tuned on the bundled smollm2-135m (30 layers) by a layer sweep on broad entries; see
    # sage/editing/TUNING.md. Negative values count from the last layer.
    layer: int = 4
    n_context: int = 2
    context_length: int = 10
    v_steps: int = 25
    v_lr: float = 1.0
    kl_factor: float = 0.0625
    weight_decay: float = 0.5
    clamp_norm_factor: float = 8.0
    covariance: str = "corpus"  # "corpus" | "identity"
    stats_tokens: int = 0  # 0: 12 x key dimension
    v_stop_nll: float = 0.05  # the value optimization stops below this target NLL

    def __post_init__(self):
        name = type(self).__name__
        check(self.v_stop_nll >= 0, name, "v_stop_nll must be >= 0")
        check(self.n_context >= 0 and self.context_length >= 1, name, "n_context >= 0, context_length >= 1")
        check(self.v_steps >= 1, name, "v_steps must be >= 1")
        check(self.v_lr > 0, name, "v_lr must be > 0")
        check(self.kl_factor >= 0 and self.weight_decay >= 0, name, "kl_factor, weight_decay >= 0")
        check(self.clamp_norm_factor > 0, name, "clamp_norm_factor must be > 0")
        check(self.covariance in ("corpus", "identity"), name,
              f"covariance must be 'corpus' or 'identity', got {self.covariance!r}")
        check(self.stats_tokens >= 0, name, "stats_tokens must be >= 0 (0 = automatic)")

    def delta_settings(self) -> compute.DeltaSettings:
        return compute.DeltaSettings(self.v_steps, self.v_lr, self.kl_factor, self.weight_decay,
                                     self.clamp_norm_factor, self.v_stop_nll)


def layer_covariances(editor: EditorBase, lm: Any, layers: Sequence[int], tokens: int,
                      cache: dict) -> dict[int, Any]:
    """Key second moments for `layers` (memoized on the editor, cached on disk by stats.py)."""
    from sage.editing import stats

    missing = [layer for layer in layers if (layer, tokens) not in cache]
    if missing:
        profile = profile_for(lm.model)
        n = tokens or stats.default_stats_tokens(lm.model, profile, missing[0])
        got = stats.covariances(lm.model, lm.tokenizer, profile, missing,
                                corpus_file=editor.context.corpus, n_tokens=n, seed=editor.hparams.seed)
        for layer, cov in got.items():
            cache[(layer, tokens)] = cov
    return {layer: cache[(layer, tokens)] for layer in layers}


@EDITORS.register("rome")
class RomeEditor(EditorBase):
    name = "rome"
    supports_batch = False
    hparams_cls = RomeHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._cov: dict = {}
        if self.hparams.covariance == "identity":
            log.warning("ROME with an identity covariance: updates ignore key statistics and "
                        "disturb unrelated inputs more; prefer covariance='corpus'")

    def apply(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile = profile_for(model)
        layer = resolve_layer(hp.layer, profile.n_layers(model))
        module = profile.mlp_module(model, layer)
        cov = None
        if hp.covariance == "corpus":
            cov = layer_covariances(self, lm, [layer], hp.stats_tokens, self._cov)[layer]
        contexts = compute.context_templates(model, tok, hp.n_context, hp.context_length, hp.seed)
        snapshot = WeightSnapshot(model, [f"{profile.mlp_out.format(layer)}.weight"])
        info = []
        try:
            for req in requests:
                torch.manual_seed(hp.seed)
                k = compute.subject_keys(model, tok, profile, layer, [req], contexts)[0]
                delta = compute.optimize_delta(model, tok, profile, layer, req, contexts,
                                               hp.delta_settings())
                dW = compute.rank_one_update(profile.weight_kv(model, layer), k, delta,
                                             None if cov is None else cov.to(k.device))
                with torch.no_grad():
                    w = module.weight
                    w.add_((dW.T if profile.conv1d else dW).to(w.dtype))
                info.append({"uid": req.uid, "layer": layer, "delta_norm": float(delta.norm())})
        except BaseException:
            snapshot.restore()
            raise
        return WeightEditHandle(snapshot, LMScorer(model, tok), {"edits": info})
