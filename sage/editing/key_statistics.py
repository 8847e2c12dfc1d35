"""Second-moment statistics of MLP keys (uncentered covariance E[k k^T] of the down-projection input).

ROME, MEMIT and AlphaEdit invert or project with these; the smallest eigenvalues, exactly the
ones C^-1 k and the null space depend on, need many tokens, so the default is 100 x the key
dimension of natural text (153,600 tokens for SmolLM2-135M's 1,536-dimensional keys).

The text comes from, in this order:
1. `--corpus FILE`: plain text, or JSONL (one JSON string or object per line; an object's
   "text" field, else all its string values);
2. the default corpus: the SaGE authors' released Vicuna-7B answers and Rules of Thumb about
   moral questions (`sage-responses/*.csv`, about 320K words; SAGE_SHARED_DATA, the sage cache
   (`sage data download sage-responses`, fetched on first use when online) or ../shared/data), its distinct texts in a fixed shuffled order;
3. a corpus the model generates itself from varied prefixes (cached), with a warning: it is
   not natural text.
Results are cached on disk under `cache_dir()/stats/<model>/` keyed by layer, corpus hash and
token count (with a `.json` note of the corpus and the build time); one forward pass fills every
requested layer and stops after the deepest one.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from sage.data.download import development_copy, ensure_dataset
from sage.data.files import write_whole
from sage.editing.handles import tensor_hash
from sage.editing.profiles import ModelProfile
from sage.errors import SageInputError
from sage.outputs import write_text
from sage.progress import progress_bar
from sage.settings import cache_dir

log = logging.getLogger(__name__)
_PROMPTS = (
    "The history of", "In my opinion,", "Scientists have found that", "The recipe calls for",
    "Yesterday I went to", "The law states that", "Once upon a time", "The best way to learn",
    "Many people believe that", "The city council", "In the morning,", "Here is a list of",
    "The main reason why", "Dear friend,", "The patient was", "According to the report,",
)
RECOMMENDED_FACTOR = 100  # tokens per key dimension
RESPONSE_COLUMNS = ("model_output_1", "model_output_2", "rot_1", "rot_2")


@dataclass(frozen=True)
class Corpus:
    text: str
    source: str  # what it is, for summaries and logs


class _Stop(Exception):
    pass


def model_key(model: Any) -> str:
    """Identity of the (unedited) model: name, architecture and a hash of its embedding rows."""
    import torch


    cfg = model.config
    emb = model.get_input_embeddings().weight[:64]
    raw = f"{getattr(cfg, '_name_or_path', '')}|{cfg.architectures}|{tensor_hash(emb)}"
    if emb.dtype != torch.float32:  # keys of a bfloat16 model differ; float32 caches keep their names
        raw += f"|{emb.dtype}"
    name = Path(str(getattr(cfg, "_name_or_path", "") or "model")).name or "model"
    return f"{name}-{hashlib.sha256(raw.encode()).hexdigest()[:12]}"


def load_corpus(path: str | Path) -> Corpus:
    """A user corpus: plain text, or JSONL (by extension, or a first line that is JSON)."""
    p = Path(path)
    if not p.is_file():
        raise SageInputError(f"{p}: corpus file not found; pass a UTF-8 text or JSONL file (--corpus)")
    try:
        raw = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SageInputError(f"{p}: corpus file is not UTF-8 text; convert it or pass another file") from None
    first = next((line.strip() for line in raw.splitlines() if line.strip()), "")
    if p.suffix.lower() == ".jsonl" or (first[:1] in "{\"" and first and _is_json(first)):
        texts = []
        for i, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise SageInputError(f"{p} line {i}: malformed JSON in a JSONL corpus; fix the line "
                                     "or pass a plain-text file") from None
            texts.append(_jsonl_text(obj))
        raw = "\n\n".join(t for t in texts if t.strip())
    if not raw.strip():
        raise SageInputError(f"{p}: corpus file has no text; pass a file with enough tokens")
    return Corpus(raw, f"file {p.name}")


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _jsonl_text(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        if isinstance(obj.get("text"), str):
            return obj["text"]
        return "\n".join(v for v in obj.values() if isinstance(v, str))
    return ""


def responses_dir(download: bool = False) -> Path | None:
    """The SaGE authors' Vicuna-7B response files (`sage-responses/`): `$SAGE_SHARED_DATA`, the copy
    `sage data download sage-responses` keeps in the sage cache, a development checkout's
    `../shared/data`; with `download`, fetched into the cache when online (None when that fails)."""

    found = development_copy("sage-responses", "sage-responses")
    if found is not None and not any(found.glob("*.csv")):
        found = None
    if found is None and download:
        try:
            found = ensure_dataset("sage-responses")
        except SageInputError as exc:  # offline or no network: the caller falls back, with a warning
            log.warning("%s", exc)
    return found


CORPUS_SEPARATOR = "\n\n"


def response_texts(directory: Path, seed: int = 0) -> list[str]:
    """The distinct answers and RoTs of every pair-layout CSV in `directory`, shuffled with a
    fixed seed: the default corpus, in its order (`responses_corpus` joins them)."""
    import pandas as pd

    texts: list[str] = []
    for f in sorted(directory.glob("*.csv")):
        df = pd.read_csv(f)
        for col in RESPONSE_COLUMNS:
            if col in df.columns:
                texts += [t.strip() for t in df[col].dropna().astype(str) if t.strip()]
    distinct = list(dict.fromkeys(texts))
    if not distinct:
        raise SageInputError(f"{directory}: no {', '.join(RESPONSE_COLUMNS)} text in its CSV files; "
                             "pass --corpus FILE")
    random.Random(seed).shuffle(distinct)
    return distinct


def responses_corpus(directory: Path, seed: int = 0) -> Corpus:
    """The distinct answers and RoTs of every pair-layout CSV in `directory`, shuffled with a
    fixed seed (so any prefix of the text samples every file and question)."""
    distinct = response_texts(directory, seed)
    files = sorted(directory.glob("*.csv"))
    return Corpus(CORPUS_SEPARATOR.join(distinct), f"sage-responses ({len(files)} Vicuna-7B files, "
                                                   f"{len(distinct)} distinct answers and RoTs)")


def default_corpus(model: Any, tokenizer: Any, n_tokens: int, seed: int = 0) -> Corpus:
    """The default statistics corpus: the Vicuna-7B responses if present, else self-generated."""
    found = responses_dir(download=True)
    if found is not None:
        return responses_corpus(found)
    log.warning("no natural-text corpus found (`sage data download sage-responses` fetches the "
                "default one); key statistics come from text the model generates itself, "
                "which is not natural text: pass --corpus FILE for trustworthy statistics")
    return self_generated_corpus(model, tokenizer, n_tokens, seed)


def self_generated_corpus(model: Any, tokenizer: Any, n_tokens: int, seed: int = 0) -> Corpus:
    """Text sampled from the model itself (offline), cached by model and size."""
    import torch

    path = cache_dir() / "corpora" / f"{model_key(model)}-self-{n_tokens}-s{seed}.txt"
    source = f"self-generated ({n_tokens} tokens, seed {seed})"
    if path.exists():
        return Corpus(path.read_text(), source)
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
    write_whole(path, lambda tmp: tmp.write_text(text))
    return Corpus(text, source)


def _cache_path(model, layer: int, corpus_hash: str, n_tokens: int) -> Path:
    return cache_dir() / "stats" / model_key(model) / f"layer{layer}-{corpus_hash[:16]}-n{n_tokens}.pt"


def second_moments(model: Any, tokenizer: Any, profile: ModelProfile, layers: Sequence[int],
                   corpus: str | Corpus, n_tokens: int, min_factor: int = 10, seq_len: int = 256,
                   batch_size: int = 8) -> dict[int, Any]:
    """{layer: E[k k^T]} over the first `n_tokens` corpus tokens (float32, on CPU; accumulated
    in float64 from float32 products of each batch)."""
    import torch

    if isinstance(corpus, str):
        corpus = Corpus(corpus, "text")
    key_dim = profile.weight_kv(model, layers[0]).shape[1]
    if n_tokens < min_factor * key_dim:
        raise SageInputError(f"covariance needs at least {min_factor}x the key dimension "
                             f"({min_factor * key_dim} tokens), got {n_tokens}; raise stats_tokens")
    corpus_hash = hashlib.sha256(corpus.text.encode()).hexdigest()
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
    if n_tokens < RECOMMENDED_FACTOR * key_dim:
        log.warning("key statistics from %d tokens, fewer than %dx the key dimension (%d): the "
                    "smallest eigenvalues are poorly estimated", n_tokens, RECOMMENDED_FACTOR,
                    RECOMMENDED_FACTOR * key_dim)
    ids = _first_tokens(tokenizer, corpus.text, n_tokens)
    if len(ids) < n_tokens:
        raise SageInputError(f"corpus ({corpus.source}) has {len(ids)} tokens, fewer than the "
                             f"{n_tokens} requested; pass a larger corpus file or lower stats_tokens")
    ids = torch.tensor(ids[:n_tokens])
    chunks = list(torch.split(ids, seq_len))
    sums = {layer: torch.zeros(key_dim, key_dim, dtype=torch.float64) for layer in todo}
    deepest = max(todo)
    handles = []

    def make_hook(layer):
        def pre(_m, args):
            x = args[0].detach().reshape(-1, key_dim)[state["mask"]].float().cpu()
            sums[layer].add_((x.T @ x).double())
            if layer == deepest:
                raise _Stop
        return pre

    state: dict[str, Any] = {}
    for layer in todo:
        handles.append(profile.mlp_module(model, layer).register_forward_pre_hook(make_hook(layer)))
    dev = next(model.parameters()).device
    log.info("computing key statistics for layers %s over %d tokens of %s", todo, len(ids), corpus.source)
    t0 = time.perf_counter()
    try:
        for s in progress_bar(range(0, len(chunks), batch_size), desc="key statistics", leave=False):
            group = chunks[s:s + batch_size]
            width = max(len(c) for c in group)
            x = torch.zeros(len(group), width, dtype=torch.long)
            m = torch.zeros(len(group), width, dtype=torch.long)
            for i, c in enumerate(group):
                x[i, :len(c)] = c
                m[i, :len(c)] = 1
            state["mask"] = m.reshape(-1).bool().to(dev)
            try:
                with torch.no_grad():
                    model(input_ids=x.to(dev), attention_mask=m.to(dev))
            except _Stop:
                pass
    finally:
        for h in handles:
            h.remove()
    seconds = time.perf_counter() - t0
    log.info("key statistics for layers %s built in %.0f s", todo, seconds)
    for layer in todo:
        cov = (sums[layer] / len(ids)).float()
        path = _cache_path(model, layer, corpus_hash, n_tokens)
        write_whole(path, lambda tmp, cov=cov: torch.save(cov, tmp))  # two processes may build the same layer
        write_text(path.with_suffix(".json"), json.dumps(
            {"source": corpus.source, "tokens": n_tokens, "corpus_sha256": corpus_hash,
             "layers_built_together": todo, "seconds": round(seconds, 1)}, indent=2))
        out[layer] = cov
    return out


def _first_tokens(tokenizer: Any, text: str, n_tokens: int) -> list[int]:
    """Token ids of the start of `text`, at least `n_tokens` of them where the text has them
    (tokenizing a prefix first: a long corpus need not be tokenized whole)."""
    chars = n_tokens * 8
    while True:
        ids = tokenizer(text[:chars], add_special_tokens=False).input_ids
        if len(ids) >= n_tokens + 16 or chars >= len(text):  # the cut only touches the end
            return ids
        chars *= 2


def covariances(model, tokenizer, profile: ModelProfile, layers: Sequence[int], *,
                corpus_file: str | None, n_tokens: int, seed: int = 0) -> dict[int, Any]:
    """Statistics from the user's corpus file, else the default corpus (see the module doc)."""
    corpus = load_corpus(corpus_file) if corpus_file else default_corpus(model, tokenizer, n_tokens, seed)
    return second_moments(model, tokenizer, profile, layers, corpus, n_tokens)


def default_stats_tokens(model, profile: ModelProfile, layer: int,
                         factor: int = RECOMMENDED_FACTOR) -> int:
    return factor * int(profile.weight_kv(model, layer).shape[1])


def corpus_name(corpus_file: str | None) -> str:
    """How a run's statistics corpus is recorded in its settings."""
    if corpus_file:
        return str(corpus_file)
    found = responses_dir()
    return "sage-responses (default)" if found is not None else "self-generated (no natural-text corpus found)"
