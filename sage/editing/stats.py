"""Second-moment statistics of MLP keys (uncentered covariance E[k k^T] of the down-projection input).

Computed from a local text corpus: a user file, or a default corpus the tool builds offline by
sampling the model itself from varied prefixes (cached). At least `min_factor` x key_dim tokens are
required. Results are cached on disk under `cache_dir()/stats/<model>/` keyed by layer, corpus hash
and token count; one forward pass fills every requested layer and stops after the deepest one.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Sequence

from sage.editing.profiles import ModelProfile
from sage.errors import SageInputError
from sage.settings import cache_dir

log = logging.getLogger(__name__)
_PROMPTS = (
    "The history of", "In my opinion,", "Scientists have found that", "The recipe calls for",
    "Yesterday I went to", "The law states that", "Once upon a time", "The best way to learn",
    "Many people believe that", "The city council", "In the morning,", "Here is a list of",
    "The main reason why", "Dear friend,", "The patient was", "According to the report,",
)


class _Stop(Exception):
    pass


def model_key(model: Any) -> str:
    """Identity of the (unedited) model: name, architecture and a hash of its embedding rows."""
    from sage.editing.handles import tensor_hash

    cfg = model.config
    emb = model.get_input_embeddings().weight[:64]
    raw = f"{getattr(cfg, '_name_or_path', '')}|{cfg.architectures}|{tensor_hash(emb)}"
    name = Path(str(getattr(cfg, "_name_or_path", "") or "model")).name or "model"
    return f"{name}-{hashlib.sha256(raw.encode()).hexdigest()[:12]}"


def default_corpus(model: Any, tokenizer: Any, n_tokens: int, seed: int = 0) -> str:
    """Text sampled from the model itself (offline), cached by model and size."""
    import torch

    path = cache_dir() / "corpora" / f"{model_key(model)}-self-{n_tokens}-s{seed}.txt"
    if path.exists():
        return path.read_text()
    log.info("building a self-generated corpus of about %d tokens (once; cached at %s)",
             n_tokens, path)
    dev = next(model.parameters()).device
    torch.manual_seed(seed)
    texts: list[str] = []
    total, batch, length = 0, 32, 128
    while total < n_tokens * 1.1:
        starts = [_PROMPTS[(len(texts) + i) % len(_PROMPTS)] for i in range(batch)]
        enc = tokenizer(starts, return_tensors="pt", padding=True).to(dev)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, top_p=0.95, temperature=1.0,
                                 max_new_tokens=length, pad_token_id=tokenizer.pad_token_id)
        texts += tokenizer.batch_decode(out, skip_special_tokens=True)
        total += int((out != tokenizer.pad_token_id).sum())
    text = "\n\n".join(t.strip() for t in texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def load_corpus(path: str | Path) -> str:
    p = Path(path)
    if not p.is_file():
        raise SageInputError(f"{p}: corpus file not found; pass a UTF-8 text file (--corpus)")
    text = p.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise SageInputError(f"{p}: corpus file is empty; pass a text file with enough tokens")
    return text


def _cache_path(model, layer: int, corpus_hash: str, n_tokens: int) -> Path:
    return cache_dir() / "stats" / model_key(model) / f"layer{layer}-{corpus_hash[:16]}-n{n_tokens}.pt"


def second_moments(model: Any, tokenizer: Any, profile: ModelProfile, layers: Sequence[int],
                   corpus: str, n_tokens: int, min_factor: int = 10, seq_len: int = 256,
                   batch_size: int = 8) -> dict[int, Any]:
    """{layer: E[k k^T]} over the first `n_tokens` corpus tokens (float32, on CPU)."""
    import torch

    key_dim = profile.weight_kv(model, layers[0]).shape[1]
    if n_tokens < min_factor * key_dim:
        raise SageInputError(f"covariance needs at least {min_factor}x the key dimension "
                             f"({min_factor * key_dim} tokens), got {n_tokens}; raise stats_tokens")
    corpus_hash = hashlib.sha256(corpus.encode()).hexdigest()
    out, todo = {}, []
    for layer in layers:
        path = _cache_path(model, layer, corpus_hash, n_tokens)
        if path.exists():
            out[layer] = torch.load(path, map_location="cpu")
            log.debug("loaded cached statistics %s", path)
        else:
            todo.append(layer)
    if not todo:
        return out
    ids = tokenizer(corpus, add_special_tokens=False).input_ids
    if len(ids) < n_tokens:
        raise SageInputError(f"corpus has {len(ids)} tokens, fewer than the {n_tokens} requested; "
                             "pass a larger corpus file or lower stats_tokens")
    ids = torch.tensor(ids[:n_tokens])
    chunks = list(torch.split(ids, seq_len))
    sums = {layer: torch.zeros(key_dim, key_dim, dtype=torch.float64) for layer in todo}
    deepest = max(todo)
    handles = []

    def make_hook(layer):
        def pre(_m, args):
            x = args[0].detach().reshape(-1, key_dim).double().cpu()
            x = x[state["mask"]]
            sums[layer].add_(x.T @ x)
            if layer == deepest:
                raise _Stop
        return pre

    state: dict[str, Any] = {}
    for layer in todo:
        handles.append(profile.mlp_module(model, layer).register_forward_pre_hook(make_hook(layer)))
    dev = next(model.parameters()).device
    log.info("computing key statistics for layers %s over %d tokens", todo, len(ids))
    try:
        from tqdm.auto import tqdm

        for s in tqdm(range(0, len(chunks), batch_size), desc="key statistics", leave=False):
            group = chunks[s:s + batch_size]
            width = max(len(c) for c in group)
            x = torch.zeros(len(group), width, dtype=torch.long)
            m = torch.zeros(len(group), width, dtype=torch.long)
            for i, c in enumerate(group):
                x[i, :len(c)] = c
                m[i, :len(c)] = 1
            state["mask"] = m.reshape(-1).bool()
            try:
                with torch.no_grad():
                    model(input_ids=x.to(dev), attention_mask=m.to(dev))
            except _Stop:
                pass
    finally:
        for h in handles:
            h.remove()
    for layer in todo:
        cov = (sums[layer] / len(ids)).float()
        path = _cache_path(model, layer, corpus_hash, n_tokens)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(cov, tmp)
        tmp.replace(path)
        out[layer] = cov
    return out


def covariances(model, tokenizer, profile: ModelProfile, layers: Sequence[int], *,
                corpus_file: str | None, n_tokens: int, seed: int = 0) -> dict[int, Any]:
    """Statistics from the user's corpus file, or from the self-generated default corpus."""
    corpus = load_corpus(corpus_file) if corpus_file else default_corpus(model, tokenizer, n_tokens, seed)
    return second_moments(model, tokenizer, profile, layers, corpus, n_tokens)


def default_stats_tokens(model, profile: ModelProfile, layer: int, factor: int = 12) -> int:
    return factor * int(profile.weight_kv(model, layer).shape[1])
