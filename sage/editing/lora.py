"""LoRA editing through `peft`: low-rank adapters on the MLP down-projections of a few layers,
trained on the target NLL. Base weights are never written; `restore()` unloads the adapters and
puts the original modules back (and the requires_grad flags), so the weights are bit-identical.

Sequential editing (`sage edit --sequential`) merges each edit's trained adapter into the
down-projection weights (peft `merge_and_unload`, W += (alpha / r) B A) and trains the next edit's
fresh adapter on the merged model; `restore()` of an edit writes back the weights from before its
merge. Merging rather than stacking one adapter per edit because: a stack of N adapters on the
same modules makes every forward pass cost grow with N, and peft activates one adapter at a time
(combining them needs `add_weighted_adapter`, a different model); a merged model is one plain
model whose edited weights are checkpointed and restored exactly as the other weight methods'.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing.editor_base import EDITORS, EditorBase, HParams, check
from sage.editing.handles import WeightEditHandle, WeightSnapshot
from sage.editing.target_scoring import LMScorer, target_nll


@dataclass(frozen=True)
class LoraHParams(HParams):
    layers: tuple[int, ...] = (2, 3, 4, 5, 6)  # see sage/editing/TUNING.md
    rank: int = 8
    alpha: float = 32.0
    dropout: float = 0.0
    steps: int = 30
    lr: float = 5e-3

    def __post_init__(self):
        name = type(self).__name__
        check(len(self.layers) >= 1, name, "layers must name at least one layer")
        check(self.rank >= 1, name, "rank must be >= 1")
        check(self.alpha > 0, name, "alpha must be > 0")
        check(0 <= self.dropout < 1, name, "dropout must be in [0, 1)")
        check(self.steps >= 1 and self.lr > 0, name, "steps >= 1 and lr > 0")


class _LoraUndo:
    """Unloads the adapters, then restores requires_grad flags (weights were never written)."""

    def __init__(self, peft_model: Any, snapshot: WeightSnapshot):
        self.peft_model = peft_model
        self.snapshot = snapshot

    def merge(self) -> None:
        """Write the adapters into the base weights and drop them (a sequence's edit)."""
        self.peft_model.merge_and_unload()
        self.peft_model = None
        self.snapshot.restore()  # requires_grad flags as before the edit

    def restore(self) -> None:
        if self.peft_model is not None:
            self.peft_model.unload()
            self.peft_model = None
        self.snapshot.restore()


@EDITORS.register("lora")
class LoraEditor(EditorBase):
    name = "lora"
    supports_batch = True
    supports_sequential = True
    hparams_cls = LoraHParams

    def _targets(self, model: Any) -> list[str]:
        profile, layers = self.locate(model, self.hparams.layers)
        return [profile.mlp_out.format(layer) for layer in layers]

    def apply(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        targets = self._targets(lm.model)
        undo = self._train(lm, requests)
        # the base model object now routes through the adapters: score it directly
        return WeightEditHandle(undo, LMScorer(lm.model, lm.tokenizer), {"targets": targets})

    def apply_next(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        """Train an adapter for `requests` on the model as it stands, then merge it into the
        weights (see the module docstring); `restore()` writes back the weights from before."""
        targets = self._targets(lm.model)
        before = WeightSnapshot(lm.model, [f"{t}.weight" for t in targets])
        undo = self._train(lm, requests)
        with self.undo_on_error(before):
            try:
                undo.merge()
            except BaseException:
                undo.restore()
                raise
        return WeightEditHandle(before, LMScorer(lm.model, lm.tokenizer), {"targets": targets, "merged": True})

    def _train(self, lm: Any, requests: Sequence[Any]) -> _LoraUndo:
        import torch
        from peft import LoraConfig, get_peft_model

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile, _ = self.locate(model, hp.layers)
        targets = self._targets(model)
        snapshot = WeightSnapshot(model, [])  # records requires_grad flags only
        torch.manual_seed(hp.seed)
        config = LoraConfig(r=hp.rank, lora_alpha=hp.alpha, lora_dropout=hp.dropout,
                            target_modules=targets, bias="none",
                            fan_in_fan_out=profile.conv1d)
        peft_model = get_peft_model(model, config)
        with self.undo_on_error(_LoraUndo(peft_model, snapshot)) as undo:
            params = [p for p in peft_model.parameters() if p.requires_grad]
            opt = torch.optim.Adam(params, lr=hp.lr)
            prompts = [r.prompt for r in requests]
            news = [r.target_new for r in requests]
            peft_model.train()
            for _ in range(hp.steps):
                opt.zero_grad()
                loss = target_nll(model, tok, prompts, news)
                if loss.item() < 1e-2:
                    break
                loss.backward()
                opt.step()
            peft_model.eval()
        return undo
