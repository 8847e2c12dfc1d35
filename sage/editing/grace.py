"""GRACE: a discrete key-value codebook adapter at one layer with a deferral radius (Hartvigsen et
al., 2023). Weights are never written.

The adapter sits on one MLP down-projection. Its key is the down-projection input at the last
prompt token; a codebook entry is (key, value, radius). For a query whose key lies within the
radius of an entry's key, the layer's output from the last prompt token onward is replaced by the
entry's value; otherwise the layer runs unchanged (deferral). Values are trained on the target NLL.
The adapter only acts inside `GraceScorer`, which tells it where each prompt ends; `restore()`
removes the hook.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing.base import EDITORS, EditorBase, HParams, check, resolve_layer
from sage.editing.handles import WrapperHandle
from sage.editing.profiles import profile_for
from sage.editing.scorer import LMScorer, encode_pairs, target_logits, target_logprobs


@dataclass(frozen=True)
class GraceHParams(HParams):
    layer: int = 6  # see sage/editing/TUNING.md
    radius: float = 0.5  # deferral radius, relative to the edit key's norm
    steps: int = 25
    lr: float = 1.0

    def __post_init__(self):
        name = type(self).__name__
        check(self.radius > 0, name, "radius must be > 0")
        check(self.steps >= 1 and self.lr > 0, name, "steps >= 1 and lr > 0")


class GraceAdapter:
    """Forward hook on one module holding the codebook."""

    def __init__(self, module: Any):
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.radii: list[float] = []
        self.prompt_last: list[int] | None = None  # set by the scorer per batch; None = inactive
        self.train_value: Any = None  # a value being optimized (applies to every row)
        self.hits = 0
        self._handle = module.register_forward_hook(self._hook)

    def remove(self) -> None:
        self._handle.remove()

    def last_keys(self, x):
        import torch

        rows = torch.arange(x.shape[0], device=x.device)
        return x[rows, torch.tensor(self.prompt_last, device=x.device)].float()

    def _hook(self, _m, args, out):
        import torch

        if self.prompt_last is None:
            return None
        x = args[0]
        replace = []
        if self.train_value is not None:
            replace = [self.train_value] * x.shape[0]
        else:
            if not self.keys:
                return None
            q = self.last_keys(x)
            K = torch.stack(self.keys)
            dist = torch.cdist(q, K)  # [B, entries]
            best = dist.argmin(-1)
            for i in range(x.shape[0]):
                j = int(best[i])
                hit = float(dist[i, j]) <= self.radii[j]
                self.hits += int(hit)
                replace.append(self.values[j] if hit else None)
        out = out.clone()
        for i, v in enumerate(replace):
            if v is not None:
                out[i, self.prompt_last[i]:] = v.to(out.dtype)
        return out


class GraceScorer(LMScorer):
    """Scores through the adapter: activates it with each batch's prompt boundaries."""

    # The codebook is keyed to teacher-forced prompt boundaries; free generation through it (which
    # would have to carry a hit across cached decoding steps) is not implemented.
    can_generate = False

    def __init__(self, model, tokenizer, adapter: GraceAdapter):
        super().__init__(model, tokenizer)
        self.adapter = adapter

    def _logits(self, batch):
        self.adapter.prompt_last = batch.prompt_last
        try:
            return target_logits(self.model, batch)
        finally:
            self.adapter.prompt_last = None


@EDITORS.register("grace")
class GraceEditor(EditorBase):
    name = "grace"
    supports_batch = False
    can_generate = False  # the codebook hit is not carried across cached decoding steps
    hparams_cls = GraceHParams

    def apply(self, lm: Any, requests: Sequence[Any]) -> WrapperHandle:
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        profile = profile_for(model)
        layer = resolve_layer(hp.layer, profile.n_layers(model))
        module = profile.mlp_module(model, layer)
        adapter = GraceAdapter(module)
        dev = next(model.parameters()).device
        try:
            for req in requests:
                batch = encode_pairs(tok, [req.prompt], [req.target_new], dev)
                seen = {}

                def grab(_m, args, out):
                    seen["k"] = args[0][0, batch.prompt_last[0]].detach().float()
                    seen["v"] = out[0, batch.prompt_last[0]].detach().float()

                h = module.register_forward_hook(grab)
                with torch.no_grad():
                    model.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                     position_ids=batch.position_ids)
                h.remove()
                value = seen["v"].clone().requires_grad_(True)
                opt = torch.optim.Adam([value], lr=hp.lr)
                rg = {n: p.requires_grad for n, p in model.named_parameters()}
                for p in model.parameters():
                    p.requires_grad_(False)
                adapter.train_value, adapter.prompt_last = value, batch.prompt_last
                try:
                    for _ in range(hp.steps):
                        opt.zero_grad()
                        logits, spans, _ = target_logits(model, batch)
                        loss = -target_logprobs(logits, spans, batch)[0].mean()
                        if loss.item() < 1e-2:
                            break
                        loss.backward()
                        opt.step()
                finally:
                    adapter.train_value, adapter.prompt_last = None, None
                    for n, p in model.named_parameters():
                        p.requires_grad_(rg[n])
                adapter.keys.append(seen["k"])
                adapter.values.append(value.detach())
                adapter.radii.append(hp.radius * float(seen["k"].norm()))
        except BaseException:
            adapter.remove()
            raise
        return WrapperHandle(GraceScorer(model, tok, adapter), adapter.remove,
                             {"layer": layer, "codebook": len(adapter.keys)})
