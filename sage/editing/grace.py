"""GRACE: a discrete key-value codebook adapter at one layer with a deferral radius (Hartvigsen et
al., 2023). Weights are never written.

The adapter sits on one MLP down-projection. A codebook entry is (key, value, epsilon): the key is
the down-projection input at the edit's key token, the value replaces the layer's output. For a
query whose key lies within epsilon (Euclidean distance, an absolute radius as in the reference)
of an entry's key, the layer's output at the key token is replaced by the entry's value
(`replacement="replace_last"`, EasyEdit's `replace_last`, the default; `{"replacement": "from_key"}`
replaces it from the key token on, our default until the generation measures showed it garbles
what follows the target: sage/editing/TUNING.md); otherwise the layer runs unchanged (deferral).
Values are trained on the target NLL.

Key token (`key`):
- `prompt_last` (the reference: EasyEdit sets `key_id` to the last prompt token). Every
  CounterMoral prompt ends with its relation ("... is recognized as"), and action paraphrases and
  neighbourhood prompts keep the edit's relation wording, so this key mostly encodes the relation:
  the codebook fires on neighbours that share it and misses relation paraphrases; the hit rates
  per prompt kind are in each entry's record (`routed_*`).
- `subject_last`: the edit's key is taken at the subject's last token. A query's subject position
  is not known, so the adapter scans every prompt token and uses the one nearest to a codebook
  key (the query's own subject where it contains the edit's subject).

The adapter only acts inside `GraceScorer`, which tells it where each prompt starts and ends;
`restore()` removes the hook. Greedy generation (the editing measures') runs through the adapter
too (`GraceScorer.continue_greedily`).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing.editor_base import EDITORS, EditorBase, HParams, check
from sage.editing.generation_measures import greedy_continuations
from sage.editing.handles import WrapperHandle
from sage.editing.target_scoring import (
    LMScorer,
    encode_pairs,
    target_logits,
    target_logprobs,
)

KEY_TOKENS = ("prompt_last", "subject_last")
#: which layer outputs a codebook hit replaces: `replace_last` (EasyEdit's `replacement:
#: replace_last`, GRACE.py: only the key token's output; the default) or `from_key` (the key
#: token's and every later position's, so the value also conditions the target tokens)
REPLACEMENTS = ("replace_last", "from_key")


@dataclass(frozen=True)
class GraceHParams(HParams):
    layer: int = 6  # see sage/editing/TUNING.md
    key: str = "prompt_last"  # the reference key token; "subject_last" scans for the subject
    eps: float = 1.0  # deferral radius, absolute (Euclidean distance between keys)
    steps: int = 25
    lr: float = 1.0
    replacement: str = "replace_last"  # EasyEdit's; or "from_key" (see REPLACEMENTS, TUNING.md)

    def __post_init__(self):
        name = type(self).__name__
        check(self.key in KEY_TOKENS, name, f"key must be one of {KEY_TOKENS}, got {self.key!r}")
        check(self.replacement in REPLACEMENTS, name,
              f"replacement must be one of {REPLACEMENTS}, got {self.replacement!r}")
        check(self.eps > 0, name, "eps must be > 0")
        check(self.steps >= 1 and self.lr > 0, name, "steps >= 1 and lr > 0")


class GraceAdapter:
    """Forward hook on one module holding the codebook."""

    def __init__(self, module: Any, scan: bool, last_only: bool = False):
        self.module = module
        self.last_only = last_only  # replace the key token's output only (EasyEdit's replace_last)
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.eps: list[float] = []
        self.scan = scan  # look for the key token among all prompt tokens
        # set by the scorer per batch: first and last prompt token of each row; None = inactive
        self.prompt_first: list[int] | None = None
        self.prompt_last: list[int] | None = None
        self.train: tuple[Any, int] | None = None  # (value being optimized, its position)
        self.last_hits: list[bool] = []
        self._handle = module.register_forward_hook(self._hook)

    def remove(self) -> None:
        self._handle.remove()

    restore = remove  # undoes the edit: the weights were never written

    def _lookup(self, x) -> list[tuple[int, int] | None]:
        """Per row: (codebook entry, key position) of a hit, or None (defer)."""
        import torch

        K = torch.stack(self.keys)
        eps = torch.tensor(self.eps, device=K.device)
        out = []
        for i in range(x.shape[0]):
            last = self.prompt_last[i]
            positions = list(range(self.prompt_first[i], last + 1)) if self.scan else [last]
            dist = torch.cdist(x[i, positions].float(), K)  # [positions, entries]
            within = dist <= eps
            if not bool(within.any()):
                out.append(None)
                continue
            # nearest hit (ties: the later position)
            d = torch.where(within, dist, torch.full_like(dist, float("inf")))
            flat = int(torch.argmin(d.flip(0).reshape(-1)))
            pos = len(positions) - 1 - flat // len(self.keys)
            out.append((flat % len(self.keys), positions[pos]))
        return out

    def _hook(self, _m, args, out):
        if self.prompt_last is None:
            return None
        x = args[0]
        if self.train is not None:
            value, pos = self.train
            out = out.clone()
            out[:, pos:pos + 1 if self.last_only else None] = value.to(out.dtype)
            return out
        if not self.keys:
            self.last_hits = [False] * x.shape[0]
            return None
        hits = self._lookup(x)
        self.last_hits = [h is not None for h in hits]
        out = out.clone()
        for i, hit in enumerate(hits):
            if hit is not None:
                j, pos = hit
                out[i, pos:pos + 1 if self.last_only else None] = self.values[j].to(out.dtype)
        return out


class GraceScorer(LMScorer):
    """Scores through the adapter: activates it with each batch's prompt boundaries and reports
    for each query whether the codebook fired (`TargetScore.routed`)."""

    # Studies sample text through a generation backend, which would bypass the adapter; the
    # editing measures generate greedily through it (`continue_greedily`).
    can_generate = False
    share_prefix = False  # the adapter scans and replaces positions of whole rows

    def __init__(self, model, tokenizer, adapter: GraceAdapter):
        super().__init__(model, tokenizer)
        self.adapter = adapter

    @contextmanager
    def _active(self, first: list[int], last: list[int]):
        """The adapter acts on rows whose prompts span positions first[i]..last[i]."""
        self.adapter.prompt_first, self.adapter.prompt_last = first, last
        try:
            yield
        finally:
            self.adapter.prompt_last = self.adapter.prompt_first = None

    def _logits(self, batch, **_cache):
        with self._active(batch.attention_mask.argmax(-1).tolist(), batch.prompt_last):  # left padding
            return target_logits(self.model, batch)

    def _routes(self, n_rows: int) -> list[bool | None]:
        return list(self.adapter.last_hits)

    def continue_greedily(self, prompts: Sequence[str], max_new: Sequence[int], decided=None) -> list[str]:
        """Greedy continuations with the adapter active. Every step recomputes the whole row (no
        attention cache), so the lookup reads the prompt's key token and a hit replaces the
        layer's output at the generated positions too, exactly as when the same tokens are
        scored teacher-forced (with a cache the later steps would not see the prompt's key).
        Unlike the reference (EasyEdit GRACE.py decoding with a cache), generated tokens are not
        looked up in the codebook themselves: only the prompt's key token is."""
        return greedy_continuations(self, prompts, max_new, decided=decided, around_step=self._active)


@EDITORS.register("grace")
class GraceEditor(EditorBase):
    name = "grace"
    supports_batch = False
    supports_sequential = True
    # studies sample through a generation backend, outside the adapter; the editing measures
    # generate through it (GraceScorer.continue_greedily)
    can_generate = False
    hparams_cls = GraceHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._adapter: GraceAdapter | None = None  # a sequence's one adapter, its codebook growing

    def _new_adapter(self, model: Any) -> tuple[GraceAdapter, int]:
        profile, [layer] = self.locate(model, [self.hparams.layer])
        return GraceAdapter(profile.mlp_module(model, layer), scan=self.hparams.key == "subject_last",
                            last_only=self.hparams.replacement == "replace_last"), layer

    def apply(self, lm: Any, requests: Sequence[Any]) -> WrapperHandle:
        adapter, layer = self._new_adapter(lm.model)
        with self.undo_on_error(adapter):
            info = [self._add(lm, adapter, req) for req in requests]
        return WrapperHandle(GraceScorer(lm.model, lm.tokenizer, adapter), adapter.remove,
                             {"layer": layer, "codebook": len(adapter.keys), "edits": info})

    # ------------------------------------------------------------------ sequential
    def start_sequence(self, lm: Any, sequence: Sequence[Any]) -> None:
        if self._adapter is not None:
            self._adapter.remove()
        self._adapter = None

    def apply_next(self, lm: Any, requests: Sequence[Any]) -> WrapperHandle:
        """Adds one codebook entry per request to the sequence's adapter (made at the first
        edit); `restore()` removes this edit's entries, and the adapter with the last of them.
        Unlike the reference, a new key inside an earlier entry's radius does not split or shrink
        that entry's radius: both entries stay and the nearest key answers."""
        if self._adapter is None:
            self._adapter = self._new_adapter(lm.model)[0]
        adapter, n = self._adapter, len(self._adapter.keys)
        undo = _Truncate(self, n)
        with self.undo_on_error(undo):
            info = [self._add(lm, adapter, req) for req in requests]
        return WrapperHandle(GraceScorer(lm.model, lm.tokenizer, adapter), undo.restore,
                             {"codebook": len(adapter.keys), "edits": info})

    def sequence_state(self) -> dict:
        import torch

        a = self._adapter
        if a is None or not a.keys:
            return {}
        return {"keys": torch.stack(a.keys), "values": torch.stack(a.values),
                "eps": torch.tensor(a.eps, dtype=torch.float64)}

    def load_sequence_state(self, lm: Any, state: dict, requests: dict):
        if "keys" not in state:
            return None
        self._adapter = self._new_adapter(lm.model)[0]
        self._adapter.keys = list(state["keys"])
        self._adapter.values = list(state["values"])
        self._adapter.eps = [float(e) for e in state["eps"]]
        return WrapperHandle(GraceScorer(lm.model, lm.tokenizer, self._adapter), _Truncate(self, 0).restore)

    # ------------------------------------------------------------------ one codebook entry
    def _add(self, lm: Any, adapter: GraceAdapter, req: Any) -> dict:
        """Trains the value of `req`'s key and appends (key, value, eps) to the codebook."""
        import torch

        hp = self.hparams
        model, tok = lm.model, lm.tokenizer
        module = adapter.module
        dev = next(model.parameters()).device
        batch = encode_pairs(tok, [req.prompt], [req.target_new], dev)
        first = int(batch.attention_mask[0].argmax())
        pos = (first + len(tok(req.subject).input_ids) - 1 if hp.key == "subject_last"
               else batch.prompt_last[0])
        seen = {}

        def grab(_m, args, out, pos=pos):
            seen["k"] = args[0][0, pos].detach().float()
            seen["v"] = out[0, pos].detach().float()

        h = module.register_forward_hook(grab)
        try:
            adapter.prompt_last = None  # the adapter stays out of the way of the clean pass
            with torch.no_grad():
                model.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 position_ids=batch.position_ids)
        finally:
            h.remove()
        value = seen["v"].clone().requires_grad_(True)
        opt = torch.optim.Adam([value], lr=hp.lr)
        rg = {n: p.requires_grad for n, p in model.named_parameters()}
        for p in model.parameters():
            p.requires_grad_(False)
        adapter.train, adapter.prompt_last = (value, pos), batch.prompt_last
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
            adapter.train, adapter.prompt_last = None, None
            for n, p in model.named_parameters():
                p.requires_grad_(rg[n])
        adapter.keys.append(seen["k"])
        adapter.values.append(value.detach())
        adapter.eps.append(hp.eps)
        return {"uid": req.uid, "key_norm": float(seen["k"].norm())}


class _Truncate:
    """Undoes a sequence's edits back to a codebook of `n` entries (removing the adapter at 0)."""

    def __init__(self, editor: GraceEditor, n: int):
        self.editor, self.n = editor, n

    def restore(self) -> None:
        a = self.editor._adapter
        if a is None:
            return
        del a.keys[self.n:], a.values[self.n:], a.eps[self.n:]
        if self.n == 0:
            a.remove()
            self.editor._adapter = None
