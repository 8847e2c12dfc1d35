"""FT-L: constrained fine-tuning of one MLP down-projection (the baseline of ROME's paper).

Adam on the target NLL of every request, with the weight change clamped elementwise to
[-norm_constraint, norm_constraint] around the original weights after each step (an L-inf ball).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing.base import EDITORS, EditorBase, HParams, check, resolve_layer
from sage.editing.handles import WeightEditHandle, WeightSnapshot
from sage.editing.profiles import profile_for
from sage.editing.scorer import LMScorer, target_nll


@dataclass(frozen=True)
class FTHParams(HParams):
    layer: int = 4  # see sage/editing/TUNING.md
    steps: int = 25
    lr: float = 5e-3
    norm_constraint: float = 5e-3
    batch_size: int = 16

    def __post_init__(self):
        name = type(self).__name__
        check(self.steps >= 1, name, "steps must be >= 1")
        check(self.lr > 0, name, "lr must be > 0")
        check(self.norm_constraint > 0, name, "norm_constraint must be > 0")
        check(self.batch_size >= 1, name, "batch_size must be >= 1")


@EDITORS.register("ft")
class FTEditor(EditorBase):
    name = "ft"
    supports_batch = True
    hparams_cls = FTHParams

    def apply(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile = profile_for(model)
        layer = resolve_layer(hp.layer, profile.n_layers(model))
        pname = f"{profile.mlp_out.format(layer)}.weight"
        snapshot = WeightSnapshot(model, [pname])
        weight = dict(model.named_parameters())[pname]
        original = weight.detach().clone()
        torch.manual_seed(hp.seed)
        try:
            for p in model.parameters():
                p.requires_grad_(False)
            weight.requires_grad_(True)
            opt = torch.optim.Adam([weight], lr=hp.lr)
            for _ in range(hp.steps):
                total = 0.0
                for s in range(0, len(requests), hp.batch_size):
                    chunk = requests[s:s + hp.batch_size]
                    opt.zero_grad()
                    loss = target_nll(model, tok, [r.prompt for r in chunk],
                                      [r.target_new for r in chunk])
                    loss.backward()
                    opt.step()
                    total += loss.item()
                    with torch.no_grad():
                        weight.copy_(original + (weight - original).clamp(-hp.norm_constraint,
                                                                          hp.norm_constraint))
                if total / max(1, -(-len(requests) // hp.batch_size)) < 1e-2:
                    break
            weight.requires_grad_(False)
        except BaseException:
            snapshot.restore()
            raise
        return WeightEditHandle(snapshot, LMScorer(model, tok), {"layer": layer})
