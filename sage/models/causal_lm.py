"""Load a causal language model with `transformers`, including GGUF files.

A GGUF file is dequantized once (about 20 s for the bundled 135M model) and saved as a regular
safetensors checkpoint under the cache directory, so later loads take under a second.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from sage.errors import SageInputError
from sage.models.identity import fingerprint
from sage.models.resolve import resolve_model_path
from sage.outputs import write_text
from sage.settings import cache_dir

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_LOADED: dict[tuple, "LoadedModel"] = {}


@dataclass
class LoadedModel:
    name: str
    path: Path  # the directory transformers loads from
    model: object
    tokenizer: object
    source: Path | None = None  # what the name resolved to (a .gguf file, a directory)


def _file_fingerprint(path: Path) -> str:
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def dequantized_dir(gguf: Path) -> Path:
    """Directory holding the safetensors conversion of `gguf`; created on first use."""
    out = cache_dir() / "models" / f"{gguf.stem}-{_file_fingerprint(gguf)}"
    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        _drop_gguf_quantization(out)  # a folder written before the config was made plain
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
    _drop_gguf_quantization(tmp)
    return publish_folder(tmp, out)


def publish_folder(tmp: Path, out: Path) -> Path:
    """Rename the finished folder `tmp` to `out` (atomic: a crash mid-save leaves no half-written
    cache). Where another process published `out` first, its copy is kept and `tmp` deleted: two
    processes that dequantize at once would otherwise leave a 0.5 GB orphan behind."""
    try:
        tmp.rename(out)
    except OSError:
        if not (out / "config.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _drop_gguf_quantization(folder: Path) -> None:
    """Make the saved config a plain one: the weights are dequantized, but the config copied from
    the GGUF-loaded model still says `quantization_config: {quant_method: gguf}`, which vLLM
    refuses ("Unknown quantization method: gguf"). Rewritten atomically."""

    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if (config.get("quantization_config") or {}).get("quant_method") != "gguf":
        return
    del config["quantization_config"]
    write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")


def model_dir(name: str) -> Path:
    """Local directory for `name` (alias, HF id (cached or downloaded), local dir or .gguf file)."""
    return loadable_dir(resolve_model_path(name, what="generator model"))


def loadable_dir(path: Path) -> Path:
    """What transformers and vLLM load for a resolved path: a .gguf file's dequantized folder, else the path."""
    return dequantized_dir(path) if path.is_file() and path.suffix == ".gguf" else path


DTYPES = ("auto", "bfloat16", "float16", "float32")


def resolve_dtype(dtype: str, device: str | None) -> str:
    """`auto`: bfloat16 on a CUDA device that supports it (float16 on one that does not),
    float32 on the CPU; any other name must be one of DTYPES."""
    if dtype not in DTYPES:

        raise SageInputError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
    if dtype != "auto":
        return dtype
    if device is not None and str(device).startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def load_causal_lm(name: str, *, device: str = "cpu", dtype: str = "float32",
                   device_map: str | None = None) -> LoadedModel:
    """Load (once per process) a causal LM and its tokenizer. Tokenizer pads on the left.

    `dtype`: one of DTYPES (`auto` resolves by device). `device_map` (e.g. "auto"): spread the
    model over the available devices with accelerate, for models larger than one GPU; `device`
    is then ignored for placement."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer


    dtype = resolve_dtype(dtype, None if device_map else device)
    source = resolve_model_path(name, what="generator model")
    # The fingerprint is part of the key: weights rewritten under the same path are loaded anew.
    key = (name, device, dtype, device_map, fingerprint(source))
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        path = loadable_dir(source)
        tok = AutoTokenizer.from_pretrained(str(path))
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if device_map:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype), device_map=device_map)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype))
            model.to(device)
        model.eval()
        loaded = LoadedModel(name=name, path=path, model=model, tokenizer=tok, source=source)
        _LOADED[key] = loaded
        return loaded
