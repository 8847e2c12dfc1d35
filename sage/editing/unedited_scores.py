"""Each entry's scores on the unedited model, computed once per model and shared by every method.

Every editing run scores each entry on the unedited model before editing it: teacher-forced
(`entry_measures.observe`) and by greedy generation (`generation_measures.observe_generation`).
Those scores depend on the model and the entry, not on the editing method, yet each method's run
computed them again: a fifth to a third of a single-edit evaluation (profiled: 3.7 of 12.1 s per
MEMIT entry, one thread, SmolLM2-135M; `benchmarks/bench_unedited_scores.py`: 0.81x with the
cache) and a sequential run's whole "unedited scores" phase
(about 20 min for 300 entries). They are cached here, in SQLite under sage's cache directory
(WAL mode, safe across processes and Ray workers), keyed by sha256 of:

- `SCORE_SCHEMA` (bumped whenever what `observe`/`observe_generation` compute changes, so older
  rows are never served);
- the model's identity: its name, the fingerprint of its weight, config and tokenizer files
  (`sage.models.identity`), dtype, device type (CPU and CUDA round differently) and, on CPU, the
  number of torch threads (kernels may split sums by thread), so a hit is bit for bit what this
  process would compute;
- the scorer's batch size (rows are padded to their batch) and the generation's extra tokens;
- every field of the entry (prompt, targets, paraphrases, neighbourhood prompts).

A cached value is the first computation's, bit for bit (floats round-trip through JSON exactly).
Only the unedited model is ever looked up here: callers ask before any edit is applied.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from sage.api import TargetScore
from sage.editing.dataset import EditRequest
from sage.editing.entry_measures import observe
from sage.editing.generation_measures import EXTRA_TOKENS, observe_generation
from sage.editing.target_scoring import LMScorer
from sage.models.identity import fingerprint
from sage.settings import cache_dir

SCORE_SCHEMA = 1
_TABLE = f"unedited_scores_v{SCORE_SCHEMA}"

Scores = dict[str, list[TargetScore]]


def scores_to_json(obs: Scores) -> dict:
    return {k: [[s.token_acc, s.exact, s.logprob, list(s.argmax), s.routed] for s in v] for k, v in obs.items()}


def scores_from_json(obs: dict) -> Scores:
    return {k: [TargetScore(a, e, lp, tuple(am), r) for a, e, lp, am, r in v] for k, v in obs.items()}


def model_identity(lm: Any) -> dict | None:
    """What the unedited model's scores depend on besides the entry; None when the model's files
    are unknown (then nothing is cached)."""
    source = getattr(lm, "source", None) or getattr(lm, "path", None)
    if source is None or not Path(source).exists():
        return None
    import torch

    param = next(lm.model.parameters())
    out = {"name": getattr(lm, "name", None), "files": fingerprint(source), "dtype": str(param.dtype),
           "device": param.device.type}
    if param.device.type == "cpu":  # CPU kernels may split sums by thread: last-bit differences
        out["threads"] = torch.get_num_threads()
    return out


def entry_key(identity: dict, req: EditRequest, batch_size: int) -> str:
    payload = {"schema": SCORE_SCHEMA, "model": identity, "batch_size": batch_size,
               "extra_tokens": EXTRA_TOKENS, "entry": dataclasses.asdict(req)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class UneditedScores:
    """`get(req)` -> (teacher-forced scores, generation outcomes) of `req` on the unedited `lm`,
    from the cache or computed (and stored) on a miss. Ask only while no edit is applied."""

    def __init__(self, lm: Any, path: str | Path | None = None):
        self.lm = lm
        self.scorer = LMScorer(lm.model, lm.tokenizer)
        self.identity = model_identity(lm)
        self.path = Path(path) if path is not None else cache_dir() / "unedited_scores.sqlite"
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._conn = None
        if self.identity is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (key TEXT PRIMARY KEY, uid TEXT, value TEXT)")
            self._conn.commit()

    def get(self, req: EditRequest) -> tuple[Scores, dict | None]:
        key = entry_key(self.identity, req, self.scorer.batch_size) if self._conn is not None else None
        if key is not None:
            with self._lock:
                row = self._conn.execute(f"SELECT value FROM {_TABLE} WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self.hits += 1
                value = json.loads(row[0])
                return scores_from_json(value["scores"]), value["generation"]
        self.misses += 1
        scores, generation = observe(self.scorer, req), observe_generation(self.lm, self.scorer, req)
        if key is not None:
            value = json.dumps({"scores": scores_to_json(scores), "generation": generation})
            with self._lock:
                self._conn.execute(f"INSERT OR REPLACE INTO {_TABLE} (key, uid, value) VALUES (?, ?, ?)",
                                   (key, req.uid, value))
                self._conn.commit()
        return scores, generation

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
