"""What a model's outputs depend on, as a short digest: the identity the generation cache keys on.

A model name alone is not an identity: the alias `smollm2-135m` names the same weights under two
backends, and a local directory can be overwritten with new weights under the same path. So a
local file or directory is identified by the content of its files: for every file its size,
modification time and a hash of its first and last MiB (weights), and a hash of the whole file for
small files (config, tokenizer, chat template). A Hugging Face cache snapshot also carries its
resolved revision (the commit the snapshot directory is named after). Digests are memoised per
path and per (size, mtime) of its files, so a long run fingerprints each model once.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

_MIB = 1 << 20
_SMALL = 4 * _MIB  # files up to this size are hashed whole (configs, tokenizers, templates)
_MEMO: dict[tuple, str] = {}
_LOCK = threading.Lock()


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                        p.relative_to(path).parts))


def _file_digest(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        if size <= _SMALL:
            h.update(fh.read())
        else:  # weights: head (header, first tensors) and tail; size and mtime catch the rest
            h.update(fh.read(_MIB))
            fh.seek(size - _MIB)
            h.update(fh.read(_MIB))
    return h.hexdigest()


def hub_revision(path: Path) -> str | None:
    """The commit of a Hugging Face cache snapshot (`.../models--org--name/snapshots/<commit>/...`)."""
    parts = Path(os.path.abspath(path)).parts  # not resolve(): snapshot files link into blobs/
    for i, part in enumerate(parts[:-1]):
        if part == "snapshots" and i > 0 and parts[i - 1].startswith("models--"):
            return parts[i + 1]
    return None


def fingerprint(path: str | Path) -> str:
    """A digest of the files at `path` (file or directory): equal digests mean equal weights,
    configuration and tokenizer, as far as size, mtime and the hashed bytes can tell."""
    path = Path(path)
    files = _files(path)
    stats = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    memo_key = (str(path.resolve()), stats)
    with _LOCK:
        if memo_key in _MEMO:
            return _MEMO[memo_key]
    base = path if path.is_dir() else path.parent
    entries = []
    for f, (_, size, mtime) in zip(files, stats):
        # resolve(): HF cache files are symlinks to blobs; read the blob's bytes, name the link.
        entries.append([str(f.relative_to(base)), size, mtime, _file_digest(f.resolve(), size)])
    payload = {"files": entries, "revision": hub_revision(path)}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]
    with _LOCK:
        _MEMO[memo_key] = digest
    return digest


def text_digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
