"""ROME's value objective, shared by ROME, MEMIT and AlphaEdit: per request, a vector added to the
down-projection output at the subject's last token that makes `target_new` likely after every
context + prompt, with a KL term at the subject's last token of "<subject> is a" and weight
decay, the vector's norm clamped (`optimize_deltas`).

Many requests share each forward/backward pass, and each step runs only the tokens from the
subject's last token on: the prefix's attention cache is computed once (sage/editing/TUNING.md).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing.capture import hooked
from sage.editing.dataset import EditRequest
from sage.editing.profiles import ModelProfile
from sage.editing.target_scoring import PairBatch, target_logits, target_logprobs
from sage.models.kv_cache import cache_kwargs, new_cache
from sage.progress import progress_bar

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeltaSettings:
    steps: int
    lr: float
    kl_factor: float
    weight_decay: float
    clamp_norm_factor: float
    stop_nll: float = 0.05  # a request whose target NLL falls below this is done
    requests_per_batch: int = 16


@dataclass
class _DeltaState:
    """One request's vector, optimizer, rows (while it is being optimized) and bookkeeping."""

    req: EditRequest
    delta: Any
    opt: Any
    rows: Any = None  # _Rows
    v0_norm: Any = None
    ref_kl: Any = None
    nll: float = float("inf")
    steps: int = 0
    done: bool = False


@dataclass
class _Rows:
    """One request's rows (each context + prompt + target, then the KL row) split at the
    subject's last token. The vector enters at that token, so nothing before it depends on the
    vector: the prefix runs once and its attention keys/values serve every step, which runs only
    the suffix (subject's last token, relation, target but its last token)."""

    suffix: list[list[int]]
    targets: list[list[int]]
    n_prompt: list[int]  # suffix tokens that belong to the prompt
    prefix_mask: Any  # [rows, P], left padded
    kv: list[tuple[Any, Any]]  # per layer, [rows, heads, P, head_dim]; empty when P == 0


def _split_rows(model, tokenizer, requests: Sequence[EditRequest], contexts: Sequence[str],
                pad: int, dev) -> list[_Rows]:
    """Rows of each request, with the prefixes of all of them run in one forward pass."""
    import torch

    per_req = []
    for req in requests:
        rows = [(ctx + req.prompt, ctx + req.subject, req.target_new) for ctx in contexts]
        # ROME's KL prompt is "<subject> is a", read at the subject's last token; causal
        # attention makes " is a" irrelevant there, so the row stops at the subject
        rows.append((req.subject, req.subject, ""))
        split = []
        for prompt, upto_subject, target in rows:
            p_ids = tokenizer(prompt).input_ids
            t_ids = tokenizer(" " + target, add_special_tokens=False).input_ids if target else []
            cut = len(tokenizer(upto_subject).input_ids) - 1
            # the last target token is predicted, never read: it is left out of the input
            split.append((p_ids[:cut], p_ids[cut:] + t_ids[:-1], t_ids, len(p_ids) - cut))
        per_req.append(split)
    prefixes = [row[0] for split in per_req for row in split]
    width = max(len(x) for x in prefixes)
    ids = torch.full((len(prefixes), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, x in enumerate(prefixes):
        ids[i, width - len(x):] = torch.tensor(x, dtype=torch.long)
        mask[i, width - len(x):] = 1
    kv = []
    if width:
        cache = new_cache()
        with torch.no_grad():
            model.base_model(input_ids=ids.to(dev), attention_mask=mask.to(dev),
                             position_ids=(mask.cumsum(-1) - 1).clamp(min=0).to(dev),
                             use_cache=True, **cache_kwargs(model, cache))
        kv = [(layer.keys, layer.values) for layer in cache.layers]
    out, at = [], 0
    for split in per_req:
        n = len(split)
        out.append(_Rows([r[1] for r in split], [r[2] for r in split], [r[3] for r in split],
                         mask[at:at + n], [(k[at:at + n], v[at:at + n]) for k, v in kv]))
        at += n
    return out


def _pack(parts: Sequence[_Rows], pad: int, dev):
    """The rows of several requests as one batch: prefixes left padded to the widest (keys and
    values padded with masked zeros), suffixes right padded, so column 0 of every suffix row is
    the subject's last token. Returns (PairBatch in suffix coordinates, packed kv, row owners)."""
    import torch


    width_p = max(p.prefix_mask.shape[1] for p in parts)
    suffixes = [s for p in parts for s in p.suffix]
    width_s = max(len(s) for s in suffixes)
    ids = torch.full((len(suffixes), width_s), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(suffixes):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1

    def left_pad(x, dim):
        shape = list(x.shape)
        shape[dim] = width_p - x.shape[dim]
        return torch.cat([x.new_zeros(shape), x], dim=dim)

    prefix_mask = torch.cat([left_pad(p.prefix_mask, 1) for p in parts])
    kv = []
    ref = next((p.kv for p in parts if p.kv), None)  # None when no request has any prefix
    for n, pair in enumerate(ref or []):
        kv.append(tuple(torch.cat([left_pad(p.kv[n][i] if p.kv else _no_prefix(pair[i], len(p.suffix)), 2)
                                   for p in parts]) for i in (0, 1)))
    pos = prefix_mask.sum(-1, keepdim=True) + torch.arange(width_s)[None, :]
    n_prompt = [n for p in parts for n in p.n_prompt]
    targets = [t for p in parts for t in p.targets]
    owner = [j for j, p in enumerate(parts) for _ in p.suffix]
    batch = PairBatch(ids.to(dev), torch.cat([prefix_mask, mask], 1).to(dev), pos.to(dev), targets,
                      [n - 1 for n in n_prompt],
                      [list(range(n, n + len(t))) for n, t in zip(n_prompt, targets)])
    return batch, kv, owner


def _no_prefix(like, rows: int):
    """Keys or values of zero length, for a request whose rows have no prefix at all."""
    return like.new_zeros((rows, like.shape[1], 0, like.shape[3]))


def _suffix_length(tokenizer, req: EditRequest) -> int:
    """Tokens from the subject's last token through the target (the rows' suffix length)."""
    full = len(tokenizer(f"{req.prompt} {req.target_new}").input_ids)
    return full - len(tokenizer(req.subject).input_ids) + 1


def optimize_delta(model, tokenizer, profile: ModelProfile, layer: int, req: EditRequest,
                   contexts: Sequence[str], cfg: DeltaSettings):
    """One request's vector (see `optimize_deltas`)."""
    return optimize_deltas(model, tokenizer, profile, layer, [req], contexts, cfg)[0]


def optimize_deltas(model, tokenizer, profile: ModelProfile, layer: int,
                    requests: Sequence[EditRequest], contexts: Sequence[str], cfg: DeltaSettings,
                    progress: bool = False):
    """Per request, a vector added to the layer's down-projection output at the subject's last
    token that makes `target_new` likely after every context + prompt, with a KL penalty on
    "<subject> is a" (at the subject's last token) and weight decay (ROME's value objective).

    Up to `cfg.requests_per_batch` requests share each forward/backward pass, each with its own
    vector and Adam state, so the result for a request does not depend on its batch mates (up to
    float rounding: padding widths differ; tested to 1e-3 relative). A
    request leaves once its NLL is below `cfg.stop_nll` (or after `cfg.steps` steps) and the next
    one takes its place, shortest suffixes first, so the batch stays full and evenly padded.
    Returns [N, d_model] in request order."""
    import torch
    d_model = profile.weight_kv(model, layer).shape[0]
    dev = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    module = profile.mlp_module(model, layer)
    states = []
    for req in requests:
        delta = torch.zeros(d_model, device=dev, requires_grad=True)
        states.append(_DeltaState(req, delta, torch.optim.Adam([delta], lr=cfg.lr)))
    queue = sorted(states, key=lambda st: _suffix_length(tokenizer, st.req))
    params = list(model.parameters())
    saved_rg = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    bar = progress_bar(total=len(states), desc="value vectors", unit="edit", enabled=progress,
               leave=False)
    active: list[_DeltaState] = []
    packed = None
    try:
        while queue or active:
            if queue and len(active) < cfg.requests_per_batch:
                entering = queue[:cfg.requests_per_batch - len(active)]
                queue = queue[len(entering):]
                for st, rows in zip(entering, _split_rows(model, tokenizer, [st.req for st in entering],
                                                          contexts, pad, dev)):
                    st.rows = rows
                active += entering
                packed = None
            if packed is None:  # repacked only when the set of requests changes
                packed = _pack([st.rows for st in active], pad, dev)
            _delta_step(model, module, active, packed, cfg)
            for st in active:
                st.done = st.done or st.steps >= cfg.steps
            if any(st.done for st in active):
                bar.update(sum(st.done for st in active))
                for st in active:
                    if st.done:
                        st.rows = None
                active = [st for st in active if not st.done]
                packed = None
    finally:
        bar.close()
        for p, rg in zip(params, saved_rg):
            p.requires_grad_(rg)
    for st in states:
        log.debug("delta for %s: nll %.3f after %d steps, |delta| %.2f", st.req.uid, st.nll,
                  st.steps, float(st.delta.detach().norm()))
    return torch.stack([st.delta.detach() for st in states])


def _delta_step(model, module, active: list[_DeltaState], packed, cfg: DeltaSettings) -> None:
    """One forward/backward over the active requests' suffix rows and one Adam step per vector."""
    import torch

    batch, kv, owner = packed
    cache = None
    if kv:  # a fresh cache each step: the forward pass appends the suffix to it
        cache = new_cache()
        for n, (k, v) in enumerate(kv):
            cache.update(k, v, n)
    kl_rows = [i for i in range(len(owner)) if i + 1 == len(owner) or owner[i + 1] != owner[i]]
    owner_t = torch.tensor(owner, device=batch.input_ids.device)
    deltas = torch.stack([st.delta for st in active])
    v0: dict[str, Any] = {}

    def post(_m, _args, out):
        v0["v"] = out[:, 0].detach().float()
        out = out.clone()
        out[:, 0] = out[:, 0] + deltas[owner_t].to(out.dtype)
        return out

    for st in active:
        st.opt.zero_grad()
    with hooked(module, post=post):
        logits, spans, kl_logits = target_logits(
            model, batch, [(r, batch.prompt_last[r]) for r in kl_rows], **cache_kwargs(model, cache))
    lps = target_logprobs(logits, spans, batch)
    kl_logp = torch.log_softmax(kl_logits, -1)
    for a, st in enumerate(active):
        if st.ref_kl is None:  # the first step runs with a zero vector: the reference
            st.ref_kl = kl_logp[a].detach()
    ref = torch.stack([st.ref_kl for st in active])
    # KL(current || initial) per request as the reference computes it (torch kl_div(initial,
    # current, log_target=True)), all rows at once (indexing per request would make the backward
    # pass fill a [requests, vocab] zero tensor per request)
    kls = (kl_logp.exp() * (kl_logp - ref)).sum(-1)
    total = 0.0
    for a, st in enumerate(active):
        mine = [i for i, o in enumerate(owner) if o == a][:-1]  # the last row is the KL prompt
        nll = -torch.stack([lps[i].mean() for i in mine]).mean()
        if st.v0_norm is None:
            st.v0_norm = v0["v"][mine].norm(dim=-1).mean()
        wd = cfg.weight_decay * st.delta.norm() / st.v0_norm ** 2  # as in ROME
        st.nll = nll.item()
        st.steps += 1
        if st.nll < cfg.stop_nll:
            st.done = True  # this vector is final; its loss is left out of the backward pass
            continue
        total = total + nll + cfg.kl_factor * kls[a] + wd
    if not torch.is_tensor(total):
        return
    total.backward()
    with torch.no_grad():
        for st in active:
            if st.done:
                continue
            st.opt.step()
            max_norm = cfg.clamp_norm_factor * st.v0_norm
            if st.delta.norm() > max_norm:
                st.delta.mul_(max_norm / st.delta.norm())
