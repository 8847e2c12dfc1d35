"""The git hash recorded next to results: '+dirty' means modified code, not appended results."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sage.provenance import git_revision


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    _git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "code.py").write_text("x = 1\n")
    results = tmp_path / "experiments" / "results" / "rome"
    results.mkdir(parents=True)
    (results / "entries.jsonl").write_text('{"uid": "a"}\n')
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return tmp_path


def test_appended_results_leave_the_hash_clean(repo):
    head = _git(repo, "rev-parse", "HEAD")
    with (repo / "experiments" / "results" / "rome" / "entries.jsonl").open("a") as f:
        f.write('{"uid": "b"}\n')
    (repo / "untracked.txt").write_text("scratch")  # untracked files never count
    # asked from inside the package folder, as sage asks from its own sources
    assert git_revision(repo / "pkg") == head


def test_modified_code_is_dirty(repo):
    head = _git(repo, "rev-parse", "HEAD")
    (repo / "pkg" / "code.py").write_text("x = 2\n")
    assert git_revision(repo / "pkg") == head + "+dirty"


def test_outside_a_repository_there_is_no_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # wherever the temp folder lies
    assert git_revision(tmp_path) is None


def test_torch_threads_are_recorded_where_torch_is_loaded():
    """provenance() names torch's thread count (CPU sums may split by thread) without importing torch."""
    code = ("import sys; from sage.provenance import provenance; a = provenance()['torch_threads']; "
            "loaded = 'torch' in sys.modules; import torch; torch.set_num_threads(3); "
            "print(a, loaded, provenance()['torch_threads'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["None", "False", "3"]
