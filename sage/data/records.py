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

from sage.outputs import write_whole, writing

log = logging.getLogger(__name__)


class RecordStore:
    """Records keyed by their `key_field` (default "key"); `records` maps key -> record."""

    def __init__(self, path: str | Path, key_field: str = "key"):
        self.path = Path(path)
        self.key_field = key_field
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
        lines = [line for line in data.split(b"\n") if line.strip()]
        for n, line in enumerate(lines, 1):
            try:
                rec = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                rec = None
            if not isinstance(rec, dict) or self.key_field not in rec:
                log.warning("%s: record %d is unreadable; it will be redone", self.path, n)
                continue
            self.records.pop(rec[self.key_field], None)  # a later record replaces an earlier one
            self.records[rec[self.key_field]] = rec
        if len(self.records) < len(lines):
            self._compact()

    def _compact(self) -> None:
        """Rewrite the file with one readable record per key (atomically), so a file that an
        older writer left with a corrupt or repeated line is clean again; no record is lost."""
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                for rec in self.records.values():
                    fh.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))

        write_whole(self.path, write)

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, records: Iterable[dict]) -> None:
        records = list(records)
        if not records:
            return
        with writing(self.path):  # a full disk or a read-only folder: one line naming the file
            # Created with the first record: a run stopped by bad input leaves no empty folders behind.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                for rec in records:
                    line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
                    os.write(fd, line)  # one write per record: whole line or nothing visible
                    self.records[rec[self.key_field]] = rec
                os.fsync(fd)
            finally:
                os.close(fd)
