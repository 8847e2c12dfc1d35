"""Teacher-forced scoring of (prompt, target) pairs, and the batching every method shares.

The target is scored with its leading space (`prompt + " " + target`), tokenized apart from the
prompt so the prompt/target boundary is exact. Greedy exact match equals "every teacher-forced
target token is the argmax" (a greedy decoder that agrees on the prefix sees the same inputs), so
one forward pass gives token accuracy, exact match and the sequence probability together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sage.api import TargetScore, TargetScorer
from sage.models.kv_cache import cache_kwargs, new_cache


@dataclass
class PairBatch:
    input_ids: Any  # [B, T] left padded
    attention_mask: Any
    position_ids: Any
    target_ids: list[list[int]]
    prompt_last: list[int]  # index of the last prompt token in each padded row
    target_pos: list[list[int]]  # index of each target token in each padded row


def tokenize_pairs(tokenizer: Any, prompts: Sequence[str],
                   targets: Sequence[str]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) per pair; the target with its leading space, tokenized apart."""
    if len(prompts) != len(targets):
        raise ValueError("prompts and targets differ in length")
    return [(tokenizer(p).input_ids, tokenizer(" " + t, add_special_tokens=False).input_ids if t else [])
            for p, t in zip(prompts, targets)]


def pair_batch(pairs: Sequence[tuple[list[int], list[int]]], pad: int, device: Any = "cpu",
               shared: int = 0) -> PairBatch:
    """The rows prompt + target, left padded. With `shared` > 0 the rows' first `shared` tokens
    (the same in every row) are left out: they come from an attention cache, the mask covers
    cache + row tokens and positions continue after them."""
    import torch

    rows = [p[shared:] + t for p, t in pairs]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    prompt_last, target_pos = [], []
    for i, (r, (p_ids, t_ids)) in enumerate(zip(rows, pairs)):
        off = width - len(r)
        ids[i, off:] = torch.tensor(r, dtype=torch.long)
        mask[i, off:] = 1
        n_prompt = len(p_ids) - shared
        prompt_last.append(off + n_prompt - 1)
        target_pos.append([off + n_prompt + j for j in range(len(t_ids))])
    pos = shared + (mask.cumsum(-1) - 1).clamp(min=0)
    full_mask = torch.cat([torch.ones((len(rows), shared), dtype=torch.long), mask], 1)
    return PairBatch(ids.to(device), full_mask.to(device), pos.to(device),
                     [t for _, t in pairs], prompt_last, target_pos)


def encode_pairs(tokenizer: Any, prompts: Sequence[str], targets: Sequence[str],
                 device: Any = "cpu") -> PairBatch:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return pair_batch(tokenize_pairs(tokenizer, prompts, targets), pad, device)


#: a common token prefix shorter than this is not worth a separate forward pass
MIN_SHARED_PREFIX = 16


def shared_prefix_length(pairs: Sequence[tuple[list[int], list[int]]]) -> int:
    """Tokens every row's prompt starts with, keeping at least one prompt token per row (the
    first target token is predicted there)."""
    first = pairs[0][0]
    n = min(len(p) for p, _ in pairs) - 1
    for p, _ in pairs[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


def prefix_cache(model: Any, prefix: list[int], rows: int):
    """The attention cache of one token prefix, shared by `rows` rows."""
    import torch

    dev = next(model.parameters()).device
    cache = new_cache()
    with torch.no_grad():
        model.base_model(input_ids=torch.tensor([prefix], dtype=torch.long, device=dev),
                         use_cache=True, **cache_kwargs(model, cache))
    shared = new_cache()
    for n, layer in enumerate(cache.layers):
        shared.update(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1), n)
    return shared


def target_logits(model: Any, batch: PairBatch, extra: Sequence[tuple[int, int]] = (), **cache):
    """Logits only where they are needed: before each target token, plus `extra` (row, pos).

    Runs the base model and applies the output embedding to the gathered hidden states, which
    avoids a [B, T, vocab] tensor. `cache`: an attention cache of earlier tokens (the batch's mask
    then covers cache + batch tokens). Returns (flat logits [n, vocab], spans per row, extra
    logits)."""
    import torch

    hidden = model.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                              position_ids=batch.position_ids, **cache).last_hidden_state
    rows, cols, spans = [], [], []
    for i, pos in enumerate(batch.target_pos):
        spans.append((len(rows), len(rows) + len(pos)))
        rows += [i] * len(pos)
        cols += [p - 1 for p in pos]
    rows += [r for r, _ in extra]
    cols += [c for _, c in extra]
    dev = hidden.device
    picked = hidden[torch.tensor(rows, device=dev, dtype=torch.long),
                    torch.tensor(cols, device=dev, dtype=torch.long)]
    logits = model.get_output_embeddings()(picked).float()
    # split, not two slices: each slice's backward would fill a zero tensor of the full logits
    targets, extra_logits = logits.split([len(rows) - len(extra), len(extra)])
    return targets, spans, extra_logits


def target_logprobs(logits: Any, spans: list[tuple[int, int]], batch: PairBatch) -> list[Any]:
    """Per row: log-probabilities of the target tokens (a 1-D tensor, differentiable).

    All rows at once through the fused cross-entropy: indexing row by row would make the
    backward pass fill a [n, vocab] zero tensor per row."""
    import torch

    flat = [t for tid in batch.target_ids for t in tid]
    ids = torch.tensor(flat, device=logits.device, dtype=torch.long)
    picked = -torch.nn.functional.cross_entropy(logits, ids, reduction="none")
    return [picked[a:b] for a, b in spans]


def target_nll(model: Any, tokenizer: Any, prompts: Sequence[str], targets: Sequence[str]):
    """Teacher-forced NLL of each target given its prompt, averaged over the target's tokens and
    then over requests (differentiable). EasyEdit's FT objective `target_new` (FT-M); LoRA."""
    import torch

    batch = encode_pairs(tokenizer, prompts, targets, next(model.parameters()).device)
    logits, spans, _ = target_logits(model, batch)
    return -torch.stack([lp.mean() for lp in target_logprobs(logits, spans, batch)]).mean()


def prompt_last_nll(model: Any, tokenizer: Any, prompts: Sequence[str], targets: Sequence[str]):
    """ROME's FT-L objective (EasyEdit `prompt_last`): every target token is predicted from the
    last prompt position alone, -mean_j log p(t_j | prompt), averaged over requests. Later target
    tokens never see the earlier ones (differentiable)."""
    import torch

    dev = next(model.parameters()).device
    batch = encode_pairs(tokenizer, prompts, [""] * len(prompts), dev)
    last = [(i, p) for i, p in enumerate(batch.prompt_last)]
    _, _, logits = target_logits(model, batch, last)
    logp = torch.log_softmax(logits.float(), -1)
    losses = []
    for i, t in enumerate(targets):
        ids = tokenizer(" " + t, add_special_tokens=False).input_ids
        losses.append(-logp[i, torch.tensor(ids, device=dev, dtype=torch.long)].mean())
    return torch.stack(losses).mean()


class LMScorer(TargetScorer):
    """Scores a (possibly edited) causal LM directly.

    Rows of a batch that start with the same tokens (an in-context edit's demonstrations) share
    one attention cache of them: the prefix runs once, each row runs only its own tokens (equal
    to full rows up to float rounding; tested)."""

    #: run a common token prefix of at least `min_shared` tokens once per batch
    share_prefix: bool = True
    min_shared: int = MIN_SHARED_PREFIX

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 32):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.calls = 0

    def _logits(self, batch: PairBatch, **cache):
        return target_logits(self.model, batch, **cache)

    def _routes(self, n_rows: int) -> list[bool | None]:
        """Per row of the last batch: whether an editing wrapper intervened (None: no decision)."""
        return [None] * n_rows

    def score(self, prompts: Sequence[str], targets: Sequence[str]) -> list[TargetScore]:
        import torch

        self.calls += 1
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        out: list[TargetScore] = []
        for s in range(0, len(prompts), self.batch_size):
            pairs = tokenize_pairs(self.tokenizer, prompts[s:s + self.batch_size],
                                   targets[s:s + self.batch_size])
            shared = shared_prefix_length(pairs) if self.share_prefix and len(pairs) > 1 else 0
            shared = shared if shared >= self.min_shared else 0
            batch = pair_batch(pairs, pad, device, shared)
            cache = prefix_cache(self.model, pairs[0][0][:shared], len(pairs)) if shared else None
            with torch.no_grad():
                logits, spans, _ = self._logits(batch, **cache_kwargs(self.model, cache))
            routes = self._routes(len(batch.target_ids))
            lps = target_logprobs(logits, spans, batch)
            for i, lp in enumerate(lps):
                a, b = spans[i]
                arg = logits[a:b].argmax(-1).tolist()
                hits = [a == t for a, t in zip(arg, batch.target_ids[i])]
                out.append(TargetScore(
                    token_acc=sum(hits) / max(len(hits), 1), exact=all(hits) and bool(hits),
                    logprob=float(lp.double().sum()), argmax=tuple(arg), routed=routes[i]))
        return out


class PromptRewriteScorer(TargetScorer):
    """A wrapper that rewrites each prompt (e.g. prepends an edit context) before scoring."""

    def __init__(self, base: TargetScorer):
        self.base = base
        self.calls = 0

    def rewrite(self, prompts: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def condition_prompts(self, prompts: Sequence[str]) -> list[str]:
        return self.rewrite(prompts)

    def score(self, prompts: Sequence[str], targets: Sequence[str]) -> list[TargetScore]:
        self.calls += 1
        return self.base.score(self.rewrite(prompts), targets)
