"""Continuous batching for the `transformers` backend.

A queue of tokenized prompts (shortest first) is decoded with at most `width` rows in flight,
one forward pass per step for all of them. A row leaves the batch as soon as it finishes (end of
turn, a stop string, or its token budget) and is yielded at once; with `refill`, waiting prompts
are prefilled and merged into the running KV cache when enough slots are free, so short answers no
longer leave their slots idle while the longest row of a fixed batch finishes.

Rows stay left-padded throughout: a merged group is padded on the left to the running cache's
length (zeros under a zero attention mask), and columns that are padding for every row are
cropped after rows leave. Each row keeps its own position ids, so its logits do not depend on its
neighbours beyond float summation order; greedy output equals one-prompt-at-a-time output (tested
on the bundled model) and sampling draws from one generator per row, seeded per request.
Refilling needs a cache whose layers are plain `DynamicLayer`s (full attention); for any other
cache the queue is decoded in fixed batches.

Prompts built from one template share their first tokens (the answer stage's chat template and
instruction: 39 of 67 tokens on average). That shared prefix is run once and its keys/values are
copied into every prefill (`shared_prefix`), the way vLLM's prefix caching does: a row is laid out
as [prefix | padding | rest of its prompt], masked and positioned exactly as if it were
contiguous, so only float summation order differs from prefilling each whole prompt.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator

from sage.api import Generation, SamplingParams
from sage.models.kv_cache import cache_kwargs, output_cache


class _Batch:
    """The rows in flight: KV cache, attention mask, next positions, next-token logits."""

    def __init__(self, cache, attn, pos, logits, rows: list[int]):
        self.cache, self.attn, self.pos, self.logits, self.rows = cache, attn, pos, logits, rows

    def select(self, keep: list[int]) -> None:
        import torch

        sel = torch.tensor(keep, device=self.attn.device)
        self.cache.batch_select_indices(sel)
        self.attn, self.pos, self.logits = self.attn[sel], self.pos[sel], self.logits[sel]
        self.rows = [self.rows[b] for b in keep]
        # Columns that are left padding for every remaining row are dead weight in every step.
        start = int(self.attn.any(dim=0).int().argmax())
        if start > 0:
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[..., start:, :], layer.values[..., start:, :]
            self.attn = self.attn[:, start:]

    def merge(self, other: _Batch) -> None:
        """Append `other`'s rows, left-padding the shorter cache to the common length."""
        import torch
        import torch.nn.functional as F

        width = max(self.attn.shape[1], other.attn.shape[1])

        def pad(t, n):  # left-pad dimension -2 (cache) or -1 (mask) by n
            return t if n == 0 else F.pad(t, (0, 0, n, 0) if t.dim() == 4 else (n, 0))

        a, b = width - self.attn.shape[1], width - other.attn.shape[1]
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            mine.keys = torch.cat([pad(mine.keys, a), pad(theirs.keys, b)])
            mine.values = torch.cat([pad(mine.values, a), pad(theirs.values, b)])
        self.attn = torch.cat([pad(self.attn, a), pad(other.attn, b)])
        self.pos = torch.cat([self.pos, other.pos])
        self.logits = torch.cat([self.logits, other.logits])
        self.rows = self.rows + other.rows


def _mergeable(cache) -> bool:
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


# Below this many shared tokens the extra forward pass and copies are not worth it.
MIN_SHARED_PREFIX = 16


class _Prefix:
    """The keys/values of the tokens every prompt starts with, computed once."""

    def __init__(self, backend, ids: list[int]):
        import torch

        self.n = len(ids)
        inp = torch.tensor([ids], dtype=torch.long, device=backend.device)
        out = backend.lm.model(input_ids=inp, use_cache=True, logits_to_keep=1)
        cache = output_cache(out)
        self.kv = [(layer.keys, layer.values) for layer in cache.layers]
        self.cache_ok = _mergeable(cache)

    def cache_for(self, n: int):
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=[(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1))
                                            for k, v in self.kv])


def shared_prefix(backend, prompts: list[list[int]]) -> _Prefix | None:
    """The common first tokens of all `prompts` (each keeps at least one token of its own), run
    once; None when they share fewer than MIN_SHARED_PREFIX tokens or the cache is not plain."""
    if len(prompts) < 2:
        return None
    # commonprefix compares any sequences; each prompt keeps its last token to predict from
    n = min(len(os.path.commonprefix(prompts)), min(len(p) for p in prompts) - 1)
    if n < MIN_SHARED_PREFIX:
        return None
    prefix = _Prefix(backend, prompts[0][:n])
    return prefix if prefix.cache_ok else None


def _prefill(backend, prompts: list[list[int]], rows: list[int], prefix: _Prefix | None = None) -> _Batch:
    import torch

    dev = backend.device
    skip = prefix.n if prefix is not None else 0
    n, width = len(rows), max(len(prompts[r]) for r in rows) - skip
    input_ids = torch.full((n, width), backend.pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(rows):
        p = prompts[r][skip:]
        input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p):] = 1
    input_ids, attn = input_ids.to(dev), attn.to(dev)
    cache = None
    if prefix is not None:
        attn = torch.cat([torch.ones((n, skip), dtype=attn.dtype, device=dev), attn], dim=1)
        cache = prefix.cache_for(n)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, skip:]
    out = backend.lm.model(input_ids=input_ids, attention_mask=attn, position_ids=pos, use_cache=True,
                           logits_to_keep=1, **cache_kwargs(backend.lm.model, cache))
    return _Batch(output_cache(out), attn, pos[:, -1:], out.logits[:, -1, :].float(), list(rows))


def decode(backend, prompts: list[list[int]], params: SamplingParams, seeds: list[int], *, width: int,
           refill: bool = True, cand_ids: list[list[int]] | None = None,
           reuse_prefix: bool = True) -> Iterator[tuple[int, Generation]]:
    """Decode every prompt; yields (prompt index, Generation) as each row finishes. `cand_ids`: per
    prompt, the first token of each of `params.candidates` (their log-probs at the first step)."""
    import torch

    dev, tok = backend.device, backend.lm.tokenizer
    queue = deque(range(len(prompts)))
    sampling = params.temperature > 0
    gens = [torch.Generator(device=dev).manual_seed(s) for s in seeds] if sampling else []
    tokens: dict[int, list[int]] = {}
    logprobs: dict[int, list[float]] = {}
    sampled_lps: dict[int, list[float]] = {}  # under the distribution each token was drawn from
    cand_lps: dict[int, list[float]] = {}
    stop_tail = max((len(s) for s in params.stop), default=0) + 16
    # Refill once a quarter of the slots is free: each merge copies the cache, like one step does.
    refill_at = max(1, width // 4)
    batch: _Batch | None = None

    def finished(row: int, reason: str) -> tuple[int, Generation]:
        text = tok.decode(tokens.pop(row), skip_special_tokens=True)
        for s in params.stop:
            cut = text.find(s)
            if cut >= 0:
                text = text[:cut]
        lps, slps = logprobs.pop(row), sampled_lps.pop(row)
        cands = dict(zip(params.candidates, cand_lps.pop(row))) if params.candidates else None
        return row, Generation(text=text, token_logprobs=lps if params.logprobs else None, finish_reason=reason,
                               candidate_logprobs=cands, sampled_logprobs=slps if params.logprobs else None)

    with torch.inference_mode():
        prefix = shared_prefix(backend, prompts) if reuse_prefix else None
        while queue or batch is not None:
            free = width - (len(batch.rows) if batch else 0)
            if queue and (batch is None or (refill and free >= min(refill_at, len(queue))
                                            and _mergeable(batch.cache))):
                new = [queue.popleft() for _ in range(min(free, len(queue)))]
                for r in new:
                    tokens[r], logprobs[r], sampled_lps[r] = [], [], []
                fresh = _prefill(backend, prompts, new, prefix)
                if batch is None:
                    batch = fresh
                else:
                    batch.merge(fresh)
            logp = torch.log_softmax(batch.logits, dim=-1)
            if params.candidates:  # at each row's first step: right after its prompt
                first = [b for b, row in enumerate(batch.rows) if row not in cand_lps]
                if first:
                    ids = torch.tensor([cand_ids[batch.rows[b]] for b in first], device=logp.device)
                    for b, lps in zip(first, logp[first].gather(1, ids).tolist()):
                        cand_lps[batch.rows[b]] = lps
            nxt, drawn = backend._pick(batch.logits, params, [gens[r] for r in batch.rows] if sampling else None)
            chosen = logp.gather(1, nxt[:, None])[:, 0].tolist()
            drawn = chosen if drawn is None else drawn.tolist()
            keep = []
            for b, (row, t) in enumerate(zip(batch.rows, nxt.tolist())):
                if t in backend.eos_ids:
                    yield finished(row, "stop")
                    continue
                tokens[row].append(t)
                logprobs[row].append(chosen[b])
                sampled_lps[row].append(drawn[b])
                if params.stop and any(
                    s in tok.decode(tokens[row][-stop_tail:], skip_special_tokens=True) for s in params.stop
                ):
                    yield finished(row, "stop")
                    continue
                if len(tokens[row]) >= params.max_new_tokens:
                    yield finished(row, "length")
                    continue
                keep.append(b)
            if not keep:
                batch = None
                continue
            if len(keep) < len(batch.rows):
                batch.select(keep)
                nxt = nxt[torch.tensor(keep, device=nxt.device)]
            batch.attn = torch.cat([batch.attn, torch.ones((len(batch.rows), 1), dtype=batch.attn.dtype,
                                                           device=dev)], dim=1)
            batch.pos = batch.pos + 1
            out = backend.lm.model(input_ids=nxt[:, None], attention_mask=batch.attn, position_ids=batch.pos,
                                   use_cache=True, **cache_kwargs(backend.lm.model, batch.cache))
            batch.cache, batch.logits = output_cache(out), out.logits[:, -1, :].float()
