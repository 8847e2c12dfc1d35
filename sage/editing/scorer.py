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


@dataclass
class PairBatch:
    input_ids: Any  # [B, T] left padded
    attention_mask: Any
    position_ids: Any
    target_ids: list[list[int]]
    prompt_last: list[int]  # index of the last prompt token in each padded row
    target_pos: list[list[int]]  # index of each target token in each padded row


def encode_pairs(tokenizer: Any, prompts: Sequence[str], targets: Sequence[str],
                 device: Any = "cpu") -> PairBatch:
    import torch

    if len(prompts) != len(targets):
        raise ValueError("prompts and targets differ in length")
    rows, tgts = [], []
    for p, t in zip(prompts, targets):
        p_ids = tokenizer(p).input_ids
        t_ids = tokenizer(" " + t, add_special_tokens=False).input_ids if t else []
        rows.append(p_ids + t_ids)
        tgts.append((len(p_ids), t_ids))
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    prompt_last, target_pos = [], []
    for i, r in enumerate(rows):
        off = width - len(r)
        ids[i, off:] = torch.tensor(r)
        mask[i, off:] = 1
        n_prompt, t_ids = tgts[i]
        prompt_last.append(off + n_prompt - 1)
        target_pos.append([off + n_prompt + j for j in range(len(t_ids))])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return PairBatch(ids.to(device), mask.to(device), pos.to(device),
                     [t for _, t in tgts], prompt_last, target_pos)


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
    """Scores a (possibly edited) causal LM directly."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 32):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.calls = 0

    def _logits(self, batch: PairBatch):
        return target_logits(self.model, batch)

    def _routes(self, n_rows: int) -> list[bool | None]:
        """Per row of the last batch: whether an editing wrapper intervened (None: no decision)."""
        return [None] * n_rows

    def score(self, prompts: Sequence[str], targets: Sequence[str]) -> list[TargetScore]:
        import torch

        self.calls += 1
        device = next(self.model.parameters()).device
        out: list[TargetScore] = []
        for s in range(0, len(prompts), self.batch_size):
            batch = encode_pairs(self.tokenizer, prompts[s:s + self.batch_size],
                                 targets[s:s + self.batch_size], device)
            with torch.no_grad():
                logits, spans, _ = self._logits(batch)
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
