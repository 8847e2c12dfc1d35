"""Checks shared by the editing tests."""
from __future__ import annotations

import torch

from sage.editing import value_optimization as vo
from sage.editing.target_scoring import target_logits, target_logprobs
from sage.models.kv_cache import cache_kwargs, new_cache


def assert_suffix_rows_match_full_forward(model, tok, profile, layer, chunks, contexts, tol=1e-4):
    """The value optimization runs only the suffix of each row (from the subject's last token on)
    over a prefix attention cache, packing requests whose prefixes were computed in different
    passes (`chunks`: lists of requests, one prefix pass each). With a vector added at the
    subject's last token, the target log-probabilities and the last prompt token's distribution
    must equal a plain forward pass over each whole row, one unpadded row at a time."""
    module = profile.mlp_module(model, layer)
    reqs = [r for chunk in chunks for r in chunk]
    torch.manual_seed(1)
    vec = torch.randn(len(reqs), profile.weight_kv(model, layer).shape[0]) * 3
    pad, dev = tok.pad_token_id or 0, torch.device("cpu")
    parts = [p for chunk in chunks for p in vo._split_rows(model, tok, chunk, contexts, pad, dev)]
    batch, kv, owner = vo._pack(parts, pad, dev)
    cache = new_cache() if kv else None
    for n, (k, v) in enumerate(kv):
        cache.update(k, v, n)

    def add_at_suffix_start(_m, _a, out):
        out = out.clone()
        out[:, 0] += vec[torch.tensor(owner)]
        return out

    last = [(i, batch.prompt_last[i]) for i in range(len(owner))]
    hook = module.register_forward_hook(add_at_suffix_start)
    try:
        with torch.no_grad():
            logits, spans, last_logits = target_logits(model, batch, last, **cache_kwargs(model, cache))
    finally:
        hook.remove()
    got = target_logprobs(logits, spans, batch)
    rows = [(j, ctx + r.prompt, ctx + r.subject, r.target_new) for j, r in enumerate(reqs) for ctx in contexts]
    rows += [(j, r.subject, r.subject, "") for j, r in enumerate(reqs)]  # the KL row
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], rows[i][3] == ""))  # request-major
    assert [rows[i][0] for i in order] == owner
    n_targets = 0
    for i, (j, prompt, upto_subject, target) in enumerate(rows[i] for i in order):
        p_ids = tok(prompt).input_ids
        t_ids = tok(" " + target, add_special_tokens=False).input_ids if target else []
        col = len(tok(upto_subject).input_ids) - 1

        def add_at_subject(_m, _a, out, j=j, col=col):
            out = out.clone()
            out[0, col] += vec[j]
            return out

        hook = module.register_forward_hook(add_at_subject)
        try:
            with torch.no_grad():
                full = torch.log_softmax(model(input_ids=torch.tensor([p_ids + t_ids])).logits[0].float(), -1)
        finally:
            hook.remove()
        pos = torch.arange(len(p_ids) - 1, len(p_ids) - 1 + len(t_ids))
        torch.testing.assert_close(got[i], full[pos, torch.tensor(t_ids, dtype=torch.long)], rtol=tol, atol=tol)
        torch.testing.assert_close(torch.log_softmax(last_logits[i].float(), -1), full[len(p_ids) - 1],
                                   rtol=tol, atol=tol)
        n_targets += len(t_ids)
    assert n_targets > 0
