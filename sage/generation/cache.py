"""The one caching wrapper every model call goes through.

`CachedBackend` wraps any `GenerationBackend`. Each request gets a content-addressed key: sha256
of (key schema version, the backend's identity, prompt or messages, sampling parameters, sample
index). The identity (`GenerationBackend.identity()`) holds everything besides the request that
decides the output: the backend name, the model name, and for backends that load weights a
fingerprint of the weight, config and tokenizer files (`sage.models.identity`), the dtype, the
device type and the chat template. So the same alias under two backends, or a local model
directory whose weights changed, never share entries. An OpenAI-compatible endpoint is identified
by its URLs and the model card each server reports (`sage.generation.openai_backend`), so the same
model name ("default", a llama.cpp alias) on another server is never served this one's answers.
A failed answer (`Generation.error`: a prompt the server refused, null content) is not stored.

A cache file that SQLite says is not a database or is malformed (truncated, overwritten) is moved
aside to `<name>.corrupt-<UTC time>` with a warning naming both files, and a new one is started;
any other SQLite error (a locked file, a full disk) is raised unchanged and nothing is moved.

Hits are served from SQLite; misses go to the wrapped backend in one call and each is stored as
soon as the backend yields it (`generate_iter`), so a killed run loses at most the rows in flight
and a rerun makes no model calls for work already done. Rows written under an older key scheme live in another table
(and their keys hash another schema version), so they are never served.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterator, Sequence

from sage.api import Generation, GenerationBackend, GenerationRequest, StreamingBackend
from sage.errors import Interrupted
from sage.generation.backend_registry import BatchInterrupted, PartialBatchError
from sage.settings import cache_dir

log = logging.getLogger(__name__)

KEY_SCHEMA = 2  # bump whenever what goes into a key changes; older rows are then never served
_TABLE = f"generations_v{KEY_SCHEMA}"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    key TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    request TEXT NOT NULL,
    text TEXT NOT NULL,
    token_logprobs TEXT,
    finish_reason TEXT,
    created REAL NOT NULL,
    candidate_logprobs TEXT,
    sampled_logprobs TEXT
)
"""
_COLUMNS = "key, identity, request, text, token_logprobs, finish_reason, created, candidate_logprobs, sampled_logprobs"
_ADDED_COLUMNS = ("candidate_logprobs", "sampled_logprobs")  # columns a cache from an older sage lacks


def request_key(identity: dict, request: GenerationRequest) -> str:
    """Content address of one model call: key schema, backend identity, prompt/messages,
    sampling parameters, sample index."""
    payload = {
        "schema": KEY_SCHEMA,
        "identity": identity,
        "prompt": request.prompt,
        "messages": [list(m) for m in request.messages] if request.messages is not None else None,
        "params": dataclasses.asdict(request.params),
        "sample": request.sample,
        "inputs": [list(i) for i in request.inputs],
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=list)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def default_cache_path() -> Path:
    return cache_dir() / "generations.sqlite"


def is_corrupt(exc: BaseException) -> bool:
    """SQLite says the file is not a database, or is malformed (not: locked, read-only, full)."""
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    return any(m in str(exc) for m in ("file is not a database", "malformed"))


class GenerationCache:
    """A small SQLite key-value store of generations (WAL mode, safe across processes)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.moved_aside: Path | None = None
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            self._start_over(exc)

    def _open(self) -> None:
        self._conn = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
        try:
            self._ino = os.stat(self.path).st_ino if self.path.exists() else None
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
            known = {row[1] for row in self._conn.execute(f"PRAGMA table_info({_TABLE})")}
            for column in _ADDED_COLUMNS:
                if column not in known:  # a cache written before this column existed
                    try:
                        self._conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} TEXT")
                    except sqlite3.OperationalError:  # another process added it first
                        pass
            self._conn.commit()
        except BaseException:
            self._conn.close()
            raise

    def _start_over(self, exc: sqlite3.DatabaseError) -> None:
        """Move the corrupt file (and its -wal/-shm files) aside and open a new cache at the path.
        A file another process already replaced with a new cache is left alone."""
        try:
            self._conn.close()
        except sqlite3.Error:
            pass
        try:
            replaced = os.stat(self.path).st_ino != getattr(self, "_ino", None)
        except FileNotFoundError:
            replaced = True
        if not replaced:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
            n = 1
            while aside.exists():
                n += 1
                aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            try:
                os.replace(self.path, aside)
                for suffix in ("-wal", "-shm"):
                    side = self.path.with_name(self.path.name + suffix)
                    if side.exists():
                        os.replace(side, aside.with_name(aside.name + suffix))
                self.moved_aside = aside
                log.warning("generation cache %s is damaged (sqlite: %s); moved it to %s and started a new cache "
                            "(answers it held are generated again)", self.path, exc, aside)
            except FileNotFoundError:  # another process moved it first
                pass
        self._open()

    def _run(self, work):
        """`work()` under the lock; a corrupt file found part way is moved aside and the work redone
        once on the new cache."""
        with self._lock:
            try:
                return work()
            except sqlite3.DatabaseError as exc:
                if not is_corrupt(exc):
                    raise
                self._start_over(exc)
                return work()

    def get_many(self, keys: Sequence[str]) -> dict[str, Generation]:
        def work():
            found: dict[str, Generation] = {}
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, text, token_logprobs, finish_reason, candidate_logprobs, sampled_logprobs FROM {_TABLE} "
                    f"WHERE key IN ({marks})",
                    chunk,
                ).fetchall()
                for key, text, lps, finish, cands, slps in rows:
                    found[key] = Generation(
                        text=text,
                        token_logprobs=json.loads(lps) if lps is not None else None,
                        finish_reason=finish,
                        cached=True,
                        candidate_logprobs=json.loads(cands) if cands is not None else None,
                        sampled_logprobs=json.loads(slps) if slps is not None else None,
                    )
            return found

        return self._run(work)

    def put_many(self, items: Sequence[tuple[str, dict, GenerationRequest, Generation]]) -> None:
        rows = [
            (
                key,
                json.dumps(identity, sort_keys=True),
                json.dumps(dataclasses.asdict(req), default=list, ensure_ascii=False),
                gen.text,
                json.dumps(gen.token_logprobs) if gen.token_logprobs is not None else None,
                gen.finish_reason,
                time.time(),
                json.dumps(gen.candidate_logprobs) if gen.candidate_logprobs is not None else None,
                json.dumps(gen.sampled_logprobs) if gen.sampled_logprobs is not None else None,
            )
            for key, identity, req, gen in items
            if gen.error is None  # a failed answer is not an answer: a later run asks again
        ]
        if not rows:
            return

        def work():
            self._conn.executemany(
                f"INSERT OR REPLACE INTO {_TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            self._conn.commit()

        self._run(work)

    def __len__(self) -> int:
        return self._run(lambda: self._conn.execute(f"SELECT COUNT(*) FROM {_TABLE}").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class CachedBackend(StreamingBackend):
    """Wraps a backend; only cache misses reach it. `calls` counts requests sent to the model."""

    def __init__(self, inner: GenerationBackend, cache: GenerationCache | None = None):
        self.inner = inner
        self.cache = cache if cache is not None else GenerationCache()
        self.name = inner.name
        self._identity = inner.identity()  # once: fingerprinting reads the weight files' ends
        self.parallelism = inner.parallelism
        self.reports_sampled_logprobs = getattr(inner, "reports_sampled_logprobs", False)
        self.calls = 0
        self.kept = 0  # generations stored by this backend (failed answers are not)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def identity(self) -> dict:
        return self._identity

    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        """Hits first, then each miss as the wrapped backend finishes it, stored before it is
        yielded (so a crash keeps every finished generation)."""
        keys = [request_key(self._identity, r) for r in requests]
        hits = self.cache.get_many(list(dict.fromkeys(keys)))
        if self.reports_sampled_logprobs:  # a row stored before sampled log-probs were recorded
            stale = {k for k, r in zip(keys, requests) if r.params.logprobs and not r.params.samples_model_distribution
                     and k in hits and hits[k].sampled_logprobs is None}
            hits = {k: g for k, g in hits.items() if k not in stale}
        where: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            where.setdefault(key, []).append(i)
        todo = [(key, requests[idx[0]]) for key, idx in where.items() if key not in hits]
        for key, idx in where.items():
            if key in hits:
                for i in idx:
                    yield i, dataclasses.replace(hits[key])
        if not todo:
            return
        log.debug("%s: %d cached, %d to generate", self.model_id, len(requests) - len(todo), len(todo))
        stored: set[int] = set()
        try:
            for j, gen in self.inner.generate_iter([r for _, r in todo]):
                key, req = todo[j]
                self._store({j: gen}, todo)
                stored.add(j)
                for i in where[key]:
                    yield i, dataclasses.replace(gen, cached=False)
        except PartialBatchError as exc:  # store what finished, so a rerun does not redo it
            self._store({j: g for j, g in exc.done.items() if j not in stored}, todo)
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C: keep what arrived (in flight when it was pressed, too)
            if isinstance(exc, BatchInterrupted):
                self._store({j: g for j, g in exc.done.items() if j not in stored}, todo)
            raise Interrupted(f"{self.kept} answers from {self.model_id} kept in the generation cache "
                              f"{self.cache.path}; rerun the same command to resume") from None

    def _store(self, done: dict[int, Generation], todo) -> None:
        self.cache.put_many([(todo[j][0], self._identity, todo[j][1], g) for j, g in done.items()])
        self.calls += len(done)
        self.kept += sum(g.error is None for g in done.values())

    def close(self) -> None:
        self.inner.close()
