"""Constrained fine-tuning of one MLP down-projection, with the two objectives EasyEdit names
(Zhang et al., 2024, "A Comprehensive Study of Knowledge Editing", Table/section on FT-L/FT-M):

- `ft-l` (FT-L, the baseline of the ROME paper, Meng et al., 2022; EasyEdit
  `objective_optimization: prompt_last`): every target token is predicted from the **last prompt
  position** alone; reference settings (ROME `hparams/FT/gpt2-xl_constr.json`, EasyEdit
  `hparams/FT/gpt2-xl.yaml`): layer 0, Adam lr 5e-4, weight change clamped elementwise to
  +-5e-4 (an L-inf ball around the original weights), 25 passes;
- `ft-m` (FT-M, EasyEdit `objective_optimization: target_new`): the teacher-forced NLL of the
  whole target after the prompt, the same constraint; its defaults were tuned on the bundled
  model (sage/editing/TUNING.md).

Both: Adam on the objective, the weights clamped after every step, stop once the mean loss of a
pass is below 1e-2 (as the reference).

Sequential editing (`sage edit --sequential`): each edit fine-tunes the weights as the earlier
edits left them, and its L-inf ball is around those weights (EasyEdit's sequential FT, which
copies the weights at the start of each edit, does the same), so the total change can grow past
`norm_constraint` over a sequence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing.editor_base import EDITORS, EditorBase, HParams, check
from sage.editing.handles import WeightEditHandle
from sage.editing.target_scoring import LMScorer, prompt_last_nll, target_nll


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


@dataclass(frozen=True)
class FTLHParams(FTHParams):
    # the reference FT-L settings (ROME / EasyEdit GPT-2 XL): first layer, tight L-inf ball
    layer: int = 0
    lr: float = 5e-4
    norm_constraint: float = 5e-4


class _FineTune(EditorBase):
    supports_batch = True
    supports_sequential = True

    @staticmethod
    def objective(model, tok, prompts, targets):
        raise NotImplementedError

    def apply(self, lm: Any, requests: Sequence[Any]) -> WeightEditHandle:
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile, [layer] = self.locate(model, [hp.layer])
        weight = profile.mlp_module(model, layer).weight
        original = weight.detach().clone()
        torch.manual_seed(hp.seed)
        losses = []
        with self.undo_on_error(self.mlp_snapshot(model, profile, [layer])) as snapshot:
            for p in model.parameters():
                p.requires_grad_(False)
            weight.requires_grad_(True)
            opt = torch.optim.Adam([weight], lr=hp.lr)
            for _ in range(hp.steps):
                total, n = 0.0, 0
                for s in range(0, len(requests), hp.batch_size):
                    chunk = requests[s:s + hp.batch_size]
                    opt.zero_grad()
                    loss = self.objective(model, tok, [r.prompt for r in chunk],
                                          [r.target_new for r in chunk])
                    if loss.item() >= 1e-2:  # as the reference: no step on a fitted batch
                        loss.backward()
                        opt.step()
                    total += loss.item() * len(chunk)
                    n += len(chunk)
                    with torch.no_grad():
                        weight.copy_(original + (weight - original).clamp(-hp.norm_constraint,
                                                                          hp.norm_constraint))
                losses.append(total / n)
                if losses[-1] < 1e-2:
                    break
            weight.requires_grad_(False)
        return WeightEditHandle(snapshot, LMScorer(model, tok),
                                {"layer": layer, "passes": len(losses), "final_loss": losses[-1]})


@EDITORS.register("ft-l")
class FTLEditor(_FineTune):
    """FT-L: the target predicted from the last prompt position (ROME's baseline)."""

    name = "ft-l"
    hparams_cls = FTLHParams
    objective = staticmethod(prompt_last_nll)


@EDITORS.register("ft-m")
class FTMEditor(_FineTune):
    """FT-M: teacher-forced NLL of the whole target (EasyEdit's `target_new` objective)."""

    name = "ft-m"
    hparams_cls = FTHParams
    objective = staticmethod(target_nll)
