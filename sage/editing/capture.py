"""Activations at the subject's last token, for the locate-then-edit methods (ROME, MEMIT,
AlphaEdit): model-generated context prefixes the key is averaged over (`context_templates`), and
inputs or outputs of several modules from the same batched forward passes, each pass stopped
after the last tap (`subject_activations`, `subject_keys`: the template-averaged key R-ROME uses).
"""
from __future__ import annotations

import contextlib
from typing import Any, Sequence

from sage.editing.dataset import EditRequest
from sage.editing.profiles import ModelProfile

_TEMPLATE_CACHE: dict[tuple, list[str]] = {}
_PREFIX_STARTS = ("The", "Therefore", "Because", "I", "You", "It is", "However", "In the end",
                  "When", "We")


@contextlib.contextmanager
def hooked(module: Any, *, pre=None, post=None):
    handles = []
    if pre is not None:
        handles.append(module.register_forward_pre_hook(pre))
    if post is not None:
        handles.append(module.register_forward_hook(post))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def context_templates(model: Any, tokenizer: Any, n: int, length: int, seed: int = 0) -> list[str]:
    """`["", gen_1 + ". ", ...]`: prefixes sampled from the model itself (cached per process)."""
    import torch

    key = (id(model), n, length, seed)
    if key in _TEMPLATE_CACHE:
        return _TEMPLATE_CACHE[key]
    out = [""]
    if n > 0:
        starts = [_PREFIX_STARTS[i % len(_PREFIX_STARTS)] for i in range(n)]
        enc = tokenizer(starts, return_tensors="pt", padding=True).to(next(model.parameters()).device)
        torch.manual_seed(seed)
        with torch.no_grad():
            gen = model.generate(**enc, do_sample=True, top_k=5, max_new_tokens=length,
                                 pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(gen, skip_special_tokens=True)
        out += [t.replace("{", " ").replace("}", " ").strip() + ". " for t in texts]
    _TEMPLATE_CACHE[key] = out
    return out


class _Stop(Exception):
    """Raised by a capture hook once the needed activation is in hand: later layers never run."""


def _subject_rows(contexts: Sequence[str], requests: Sequence[EditRequest]) -> list[str]:
    """Texts ending at each subject's last token: len(contexts) rows per request, request-major."""
    return [ctx + r.subject for r in requests for ctx in contexts]


def _last_token_activations(model, tokenizer, taps: Sequence[tuple[Any, bool]],
                            texts: Sequence[str], rows_per_batch: int = 64) -> list:
    """For each tap (module, output?): the module's input (or output) at each text's last token,
    [len(texts), dim]. Texts go in batches; each forward pass stops once every tap has fired."""
    import torch

    captured: list[list] = [[] for _ in taps]
    fired = [0]

    def grab(i, x):
        captured[i].append(x.detach()[:, -1, :].float())
        fired[0] += 1
        if fired[0] == len(taps):
            raise _Stop

    def pre(i):
        return lambda _m, args: grab(i, args[0])

    def post(i):
        return lambda _m, _args, out: grab(i, out[0] if isinstance(out, tuple) else out)

    dev = next(model.parameters()).device
    with contextlib.ExitStack() as stack:
        for i, (module, output) in enumerate(taps):
            stack.enter_context(hooked(module, **({"post": post(i)} if output else {"pre": pre(i)})))
        for s in range(0, len(texts), rows_per_batch):
            enc = tokenizer(list(texts[s:s + rows_per_batch]), return_tensors="pt", padding=True)
            mask = enc.attention_mask.to(dev)  # left padding: the last token is at -1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            fired[0] = 0
            with torch.no_grad():
                try:
                    model(input_ids=enc.input_ids.to(dev), attention_mask=mask, position_ids=pos)
                except _Stop:
                    pass
    return [torch.cat(c) for c in captured]


def subject_activations(model, tokenizer, requests: Sequence[EditRequest], contexts: Sequence[str],
                        taps: Sequence[tuple[Any, bool]]) -> list:
    """Per tap (module, output?), its input (or output) at the subject's last token averaged over
    the contexts, one row per request: [N, dim]. All taps come from the same forward passes."""
    acts = _last_token_activations(model, tokenizer, taps, _subject_rows(contexts, requests))
    return [a.reshape(len(requests), len(contexts), -1).mean(1) for a in acts]


def subject_keys(model, tokenizer, profile: ModelProfile, layer: int,
                 requests: Sequence[EditRequest], contexts: Sequence[str]):
    """Template-averaged keys (down-projection inputs), one row per request: [N, key_dim]."""
    return subject_activations(model, tokenizer, requests, contexts,
                               [(profile.mlp_module(model, layer), False)])[0]
