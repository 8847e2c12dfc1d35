"""ROME: a rank-one update of one MLP down-projection (Meng et al., 2022) with the R-ROME correction.

The key is the subject's last-token input to the down-projection averaged over model-generated
context prefixes, and that same averaged key is used in the update (R-ROME: using the unaveraged
prompt key there makes the update unstable). The value is optimized with the target NLL, a KL term
on "<subject> is a" (at the subject's last token, KL(current || initial), as the reference) and
weight decay. `covariance="identity"` is allowed, with a warning.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing import solvers
from sage.editing.editor_base import EDITORS
from sage.editing.capture import subject_keys
from sage.editing.handles import WeightEditHandle
from sage.editing.locate_then_edit import LocateThenEditEditor, ValueOptHParams
from sage.editing.target_scoring import LMScorer
from sage.editing.value_optimization import optimize_delta


@dataclass(frozen=True)
class RomeHParams(ValueOptHParams):
    # Tuned on the bundled smollm2-135m (30 layers) by a layer sweep on broad entries; see
    # sage/editing/TUNING.md. Negative values count from the last layer.
    layer: int = 4


@EDITORS.register("rome")
class RomeEditor(LocateThenEditEditor):
    name = "rome"
    supports_batch = False
    hparams_cls = RomeHParams

    def edit_layers(self, model: Any) -> list[int]:
        return self.locate(model, [self.hparams.layer])[1]

    def apply(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile, [layer] = self.locate(model, [hp.layer])
        cov = self.covariances(lm, [layer])[layer]
        contexts = self.contexts(lm)
        info = []
        with self.undo_on_error(self.mlp_snapshot(model, profile, [layer])) as snapshot:
            for req in requests:
                torch.manual_seed(hp.seed)
                k = subject_keys(model, tok, profile, layer, [req], contexts)[0]
                delta = optimize_delta(model, tok, profile, layer, req, contexts, hp.delta_settings())
                dW = solvers.rank_one_update(profile.weight_kv(model, layer), k, delta,
                                             None if cov is None else cov.to(k.device))
                weight = profile.mlp_module(model, layer).weight
                with torch.no_grad():
                    weight.add_((dW.T if profile.conv1d else dW).to(weight.dtype))
                info.append({"uid": req.uid, "layer": layer, "delta_norm": float(delta.norm())})
        return WeightEditHandle(snapshot, LMScorer(model, tok), {"edits": info})
