"""Checkpoints of a sequential editing run: the edited weights and the editor's own state, with
sha256 checksums, verified on resume.

A checkpoint is a folder `state/step-<n>/` in the run directory holding
- `weights.safetensors`: the current values of every parameter an edit so far wrote (the union of
  the handles' `edited_parameters()`), copied exactly, so a resumed run's weights equal the
  uninterrupted run's bit for bit;
- `editor.safetensors` and `editor.json`: what the editor holds about the edits so far
  (`EditorBase.sequence_state()`: tensors, and JSON values such as a memory's uids);
- nothing else: the checksums go into the checkpoint's record (`checkpoints.jsonl`), which is
  appended only after the folder is complete (written as `step-<n>.tmp`, fsynced, renamed), so a
  record always names a whole checkpoint, and a kill between the two leaves the previous
  checkpoint in place (older folders are removed only once a newer record is stored).
safetensors files are byte-for-byte reproducible, so two runs that reach the same state write
the same checksums.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from sage.data.download import sha256_file
from sage.editing.handles import WeightSnapshot
from sage.errors import SageInputError
from sage.outputs import fsync_dir

STATE_DIR = "state"
FILES = ("weights.safetensors", "editor.safetensors", "editor.json")


def save_state(run_dir: Path, step: int, weights: dict[str, Any], editor_state: dict[str, Any]) -> dict:
    """Write checkpoint `step`; returns what its record stores: {"dir", "sha256": {file: digest}}."""
    import torch
    from safetensors.torch import save_file

    rel = f"{STATE_DIR}/step-{step}"
    final = Path(run_dir) / rel
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors = {k: v for k, v in editor_state.items() if isinstance(v, torch.Tensor)}
    plain = {k: v for k, v in editor_state.items() if not isinstance(v, torch.Tensor)}
    save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in weights.items()},
              str(tmp / "weights.safetensors"))
    save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()},
              str(tmp / "editor.safetensors"))
    (tmp / "editor.json").write_text(json.dumps(plain, sort_keys=True))
    for name in FILES:
        with open(tmp / name, "rb") as fh:
            os.fsync(fh.fileno())
    shutil.rmtree(final, ignore_errors=True)  # a folder a killed run wrote but never recorded
    os.replace(tmp, final)
    fsync_dir(final.parent)
    return {"dir": rel, "sha256": {name: sha256_file(final / name) for name in FILES}}


def load_state(run_dir: Path, info: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """(weights, editor state) of the checkpoint a record names, after checking every file's
    sha256 against the record; one line naming the file otherwise."""
    from safetensors.torch import load_file

    folder = Path(run_dir) / info["dir"]
    for name, digest in info["sha256"].items():
        path = folder / name
        if not path.is_file():
            raise SageInputError(f"{path}: checkpoint file missing; delete {run_dir} to start the sequence over")
        if sha256_file(path) != digest:
            raise SageInputError(f"{path}: checksum differs from its record (the file changed or is damaged); "
                                 f"delete {run_dir} to start the sequence over")
    weights = load_file(str(folder / "weights.safetensors"))
    state: dict[str, Any] = dict(load_file(str(folder / "editor.safetensors")))
    state.update(json.loads((folder / "editor.json").read_text()))
    return weights, state


def prune(run_dir: Path, keep: str) -> None:
    """Remove every checkpoint folder but `keep` (called once `keep`'s record is stored)."""
    root = Path(run_dir) / STATE_DIR
    for path in root.glob("step-*"):
        if f"{STATE_DIR}/{path.name}" != keep:
            shutil.rmtree(path, ignore_errors=True)


def install_weights(model: Any, weights: dict[str, Any]):
    """Copy checkpointed weights into `model`; returns the snapshot that writes the unedited
    values back (a resumed sequence's first handle)."""
    import torch

    snapshot = WeightSnapshot(model, sorted(weights))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value.to(params[name].device))
    return snapshot
