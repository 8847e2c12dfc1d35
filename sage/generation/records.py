"""Append-only JSONL stores (one record per finished item) and question-file input.

A stage appends one line per finished item with a single `write` on an O_APPEND descriptor,
so a run killed at any moment leaves whole lines plus at most one torn last line. Opening a
store drops a torn tail, and later records with the same key replace earlier ones, so a resumed
run neither loses nor duplicates items.
"""
from __future__ import annotations

import json
import logging
import os
from importlib import resources
from pathlib import Path
from typing import Iterable

from sage.data import files
from sage.errors import SageInputError

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


# --------------------------------------------------------------------------- tables
def read_table(path: str | Path, what: str = "file"):
    """A .csv / .jsonl / .parquet table (CSV cells as strings); one clear error otherwise."""
    return files.read_table(path, as_strings=True, empty_hint=f"give a {what} with a header and rows")


write_table = files.write_table


def demo_questions_path() -> Path:
    return Path(str(resources.files("sage").joinpath("resources/demo_questions.csv")))


def read_questions(path: str | Path | None = None):
    """Questions as a DataFrame with string `question_id`, `question` and, if the file has
    them, user-supplied paraphrases in `paraphrase` (one row per paraphrase).

    No path: the built-in demo set of moral questions.
    """
    path = Path(path) if path is not None else demo_questions_path()
    df = read_table(path, "questions file")
    if "question" not in df.columns:
        raise SageInputError(
            f"questions file {str(path)!r} has no 'question' column (columns: {', '.join(map(str, df.columns))}); "
            "add a header row with 'question_id,question'"
        )
    df = df.copy()
    if "question_id" not in df.columns:
        df.insert(0, "question_id", [f"q{i + 1:04d}" for i in range(len(df))])
    df["question_id"] = df["question_id"].astype(str)
    df["question"] = df["question"].astype(str).str.strip()
    empty = df.index[df["question"] == ""].tolist()
    if empty:
        raise SageInputError(f"questions file {str(path)!r}: row {empty[0] + 2} has an empty question; fill it or delete the row")
    clash = df.groupby("question_id")["question"].nunique()
    if (clash > 1).any():
        qid = clash.index[clash > 1][0]
        raise SageInputError(f"questions file {str(path)!r}: question_id {qid!r} is used for different questions; make ids unique")
    if "paraphrase" not in df.columns:
        df = df.drop_duplicates("question_id")
    return df.reset_index(drop=True)
