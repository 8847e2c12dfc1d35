"""Publishing the dequantized model folder (sage.models.causal_lm.publish_folder): the first
finished copy wins; a process that finishes second deletes its own copy instead of leaving it."""
from __future__ import annotations

from pathlib import Path

import pytest

from sage.models.causal_lm import publish_folder


def _folder(path: Path, marker: str) -> Path:
    path.mkdir()
    (path / "config.json").write_text(marker)
    (path / "model.safetensors").write_bytes(marker.encode() * 100)
    return path


def test_publish_folder_renames_into_place(tmp_path):
    tmp = _folder(tmp_path / "m.tmp1", "first")
    out = publish_folder(tmp, tmp_path / "m")
    assert out == tmp_path / "m" and (out / "config.json").read_text() == "first"
    assert not tmp.exists()


def test_publish_folder_second_process_drops_its_copy(tmp_path):
    first = publish_folder(_folder(tmp_path / "m.tmp1", "first"), tmp_path / "m")
    late = _folder(tmp_path / "m.tmp2", "second")
    out = publish_folder(late, tmp_path / "m")
    assert out == first and (out / "config.json").read_text() == "first"  # the published copy is kept
    assert not late.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_publish_folder_failure_without_a_published_copy_raises(tmp_path):
    tmp = _folder(tmp_path / "m.tmp1", "first")
    blocker = tmp_path / "m"
    blocker.mkdir()
    (blocker / "stray").write_text("x")  # a non-empty folder that is no model: rename fails, nothing to reuse
    with pytest.raises(OSError):
        publish_folder(tmp, blocker)
    assert tmp.exists()  # kept for inspection; nothing was published
