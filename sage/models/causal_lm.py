"""Load a causal language model with `transformers`, including GGUF files.

A GGUF file is dequantized once (about 20 s for the bundled 135M model) and saved as a regular
safetensors checkpoint under the cache directory, so later loads take under a second.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from sage.models.resolve import resolve_model_path
from sage.settings import cache_dir

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str], "LoadedModel"] = {}


@dataclass
class LoadedModel:
    name: str
    path: Path  # the directory transformers loads from
    model: object
    tokenizer: object


def _file_fingerprint(path: Path) -> str:
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def dequantized_dir(gguf: Path) -> Path:
    """Directory holding the safetensors conversion of `gguf`; created on first use."""
    out = cache_dir() / "models" / f"{gguf.stem}-{_file_fingerprint(gguf)}"
    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("dequantizing %s once into %s (about 20 s)", gguf.name, out)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # A GGUF-loaded model refuses save_pretrained; a fresh model from its config saves fine.
    fresh = AutoModelForCausalLM.from_config(gguf_model.config)
    fresh.load_state_dict(gguf_model.state_dict())
    fresh.generation_config = gguf_model.generation_config
    fresh.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    try:
        tmp.rename(out)  # atomic publish: a crash mid-save leaves no half-written cache
    except OSError:
        if not (out / "config.json").exists():
            raise
    return out


def model_dir(name: str) -> Path:
    """Local directory for `name` (alias, HF id (cached or downloaded), local dir or .gguf file)."""
    path = resolve_model_path(name, what="generator model")
    if path.is_file() and path.suffix == ".gguf":
        return dequantized_dir(path)
    return path


def load_causal_lm(name: str, *, device: str = "cpu", dtype: str = "float32") -> LoadedModel:
    """Load (once per process) a causal LM and its tokenizer. Tokenizer pads on the left."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = (name, device, dtype)
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        path = model_dir(name)
        tok = AutoTokenizer.from_pretrained(str(path))
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype))
        model.to(device).eval()
        loaded = LoadedModel(name=name, path=path, model=model, tokenizer=tok)
        _LOADED[key] = loaded
        return loaded
