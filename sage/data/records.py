"""The one append-only JSONL record store (one record per finished item) that generation,
editing runs and studies write through.

A stage appends one line per finished item with a single `write` on an O_APPEND descriptor,
so a run killed at any moment leaves whole lines plus at most one torn last line. Opening a
store drops a torn tail, and later records with the same key replace earlier ones, so a resumed
run neither loses nor duplicates items.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable

log = logging.getLogger(__name__)


class RecordStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # torn last line from a killed run: cut it off before appending
            log.warning("%s: dropping an incomplete last record (%d bytes)", self.path, len(data) - end)
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
            data = data[:end]
        for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d: skipping an unreadable record", self.path, n)
                continue
            self.records[rec["key"]] = rec

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, records: Iterable[dict]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for rec in records:
                line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
                os.write(fd, line)  # one write per record: whole line or nothing visible
                self.records[rec["key"]] = rec
            os.fsync(fd)
        finally:
            os.close(fd)
