"""Runtime settings (paths, device) kept apart from method hyperparameters and model profiles."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def cache_dir() -> Path:
    """Root of the on-disk cache (dequantized models, layer statistics, model-call cache).

    Override with SAGE_CACHE_DIR; defaults to $XDG_CACHE_HOME/sage or ~/.cache/sage.
    """
    env = os.environ.get("SAGE_CACHE_DIR")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "sage"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _is_true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def offline() -> bool:
    """No network for models or data: `--offline`, HF_HUB_OFFLINE, or TRANSFORMERS_OFFLINE.

    Read at call time (huggingface_hub reads its flag once at import). HF_HUB_OFFLINE wins over
    TRANSFORMERS_OFFLINE when both are set, as in huggingface_hub.
    """
    if _is_true(os.environ.get("SAGE_OFFLINE")):
        return True
    return _is_true(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))


def default_device() -> str:
    env = os.environ.get("SAGE_DEVICE")
    if env:
        return env
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class RuntimeSettings:
    device: str = field(default_factory=default_device)
    cache: Path = field(default_factory=cache_dir)
    seed: int = 0
