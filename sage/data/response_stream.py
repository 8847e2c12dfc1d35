"""A responses table read in chunks of whole questions, in bounded memory.

Scoring a large table must not hold every text (and every embedding) of the file at once. Two
passes over the file, each reading it in row chunks (CSV, JSONL or Parquet):

1. an index: each row's question key ((model, question_id) after the usual column aliases), the
   rows with an empty text in a scored column, the order questions first appear and the row where
   each question ends; texts are checked and dropped, so this pass holds integers only;
2. the chunks: rows are gathered per question and a question is handed on once its last row has
   been read, `chunk_questions` questions at a time. A file whose questions are contiguous (ours,
   the authors') keeps at most one question pending; interleaved rows are held until their
   question is complete, never dropped.

A DataFrame already in memory goes through the same two passes over row slices, so a run gives
the same numbers whichever way its table arrives.
"""
from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pandas as pd

from sage.data.files import ID_COLUMNS, check_parquet_text_columns, check_text_fields
from sage.data.responses import TEXT_COLUMNS, TEXT_FIELDS, ValidationReport, blank_ids, normalize_columns
from sage.errors import SageInputError

READ_ROWS = 20_000  # rows per raw read


# --------------------------------------------------------------------------- raw row chunks
def raw_chunks(source, rows: int = READ_ROWS) -> Iterator[pd.DataFrame]:
    """The table in row chunks, as read (no column aliases yet); each chunk's index holds the
    0-based data row numbers of the whole table."""
    if isinstance(source, pd.DataFrame):
        for start in range(0, max(len(source), 1), rows):
            yield source.iloc[start:start + rows].set_axis(range(start, start + min(rows, len(source) - start)))
        return
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json", ".parquet"):
        raise SageInputError(f"{path}: unsupported format {suffix or '(none)'}; use .csv, .jsonl or .parquet")
    if not path.exists():
        raise SageInputError(f"{path}: file not found")
    if path.is_dir():
        raise SageInputError(f"{path}: is a directory; pass a file")
    if path.stat().st_size == 0:
        raise SageInputError(f"{path}: the file is empty; give a responses file with a header and rows")
    reader = {".csv": _csv_chunks, ".parquet": _parquet_chunks}.get(suffix, _jsonl_chunks)
    start = 0
    for chunk in reader(path, rows):
        yield chunk.set_axis(range(start, start + len(chunk)))
        start += len(chunk)


def _check_utf8(path: Path, block: int = 1 << 20) -> None:
    """One line naming the first line that is not UTF-8, read block by block (no whole-file copy)."""

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines = 0, 0
    with open(path, "rb") as fh:
        while True:
            data = fh.read(block)
            try:
                decoder.decode(data, final=not data)
            except UnicodeDecodeError as exc:
                bad = max(exc.start - len(exc.object) + len(data), 0)  # the error's place within this block
                line = lines + data[:bad].count(b"\n") + 1
                raise SageInputError(f"{path}: line {line} is not valid UTF-8 (byte {offset + bad}); "
                                     "re-save the file as UTF-8") from None
            if not data:
                return
            offset += len(data)
            lines += data.count(b"\n")


def _csv_chunks(path: Path, rows: int):
    _check_utf8(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            yield from pd.read_csv(fh, chunksize=rows, dtype=ID_COLUMNS)
    except pd.errors.ParserError as exc:
        raise SageInputError(f"{path}: malformed CSV ({str(exc).strip().splitlines()[0]}); check quoting on that line") \
            from None
    except pd.errors.EmptyDataError:
        raise SageInputError(f"{path}: the file has no columns; give a responses file with a header and rows") from None


def _parquet_chunks(path: Path, rows: int):
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        check_parquet_text_columns(path, parquet.schema_arrow, TEXT_FIELDS)
        for batch in parquet.iter_batches(batch_size=rows):
            yield batch.to_pandas()
    except SageInputError:
        raise
    except Exception as exc:  # pyarrow raises several types for broken files
        raise SageInputError(f"{path}: not a readable Parquet file ({type(exc).__name__}); re-export it") from None


def _jsonl_chunks(path: Path, rows: int):
    records: list[dict] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                raise SageInputError(f"{path}: line {lineno} is not valid UTF-8; re-save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SageInputError(f"{path}: line {lineno} is not valid JSON ({exc.msg} at column {exc.colno}); "
                                     "each line must be one JSON object") from None
            if not isinstance(rec, dict):
                raise SageInputError(f"{path}: line {lineno} is not a JSON object; each line must be one object")
            check_text_fields(path, lineno, rec, TEXT_FIELDS)
            records.append(rec)
            if len(records) == rows:
                yield pd.DataFrame.from_records(records)
                records = []
    if records:
        yield pd.DataFrame.from_records(records)


def peek_columns(source) -> list[str]:
    """The table's column names, from its first chunk."""
    if isinstance(source, pd.DataFrame):
        return [str(c) for c in source.columns]
    for chunk in raw_chunks(source, rows=50):
        return [str(c) for c in chunk.columns]
    raise SageInputError(f"{source}: the table has a header but no rows")


# --------------------------------------------------------------------------- question chunks
@dataclass
class TableIndex:
    """Pass one: where each question's rows are and which rows cannot be scored."""

    order: dict = field(default_factory=dict)  # (model, qid) -> position of first appearance
    last_row: dict = field(default_factory=dict)  # (model, qid) -> data row of its last row
    valid_rows: dict = field(default_factory=dict)  # (model, qid) -> rows with every text present
    rows_per_model: dict = field(default_factory=dict)
    skipped_per_model: dict = field(default_factory=dict)
    report: ValidationReport = field(default_factory=ValidationReport)
    n_rows: int = 0
    # (model, qid) -> its question text (or None), only while every row seen of it is unscorable:
    # such a question gets no chunk but is still listed, as undefined
    unscorable: dict = field(default_factory=dict)
    # (model, qid) -> (its question text, the data row it first appears on)
    question_text: dict = field(default_factory=dict)
    # (model, qid) -> data rows (1-based) whose question text differs from the first one
    text_clashes: dict = field(default_factory=dict)
    nul_rows: list = field(default_factory=list)  # data rows (1-based) whose texts held NUL bytes

    def warnings(self, name: str) -> list[str]:
        """The run summary's warnings about the table: NUL bytes removed from texts (always), and,
        under skip_invalid, rows skipped (and counted) for another question text under an id."""
        out = []
        if self.nul_rows:
            out.append(f"{name}: removed NUL bytes from the texts of {len(self.nul_rows)} row(s) "
                       f"({_rows(self.nul_rows)}); check how the file was exported")
        for (model, qid), rows in self.text_clashes.items():
            text, first = self.question_text[(model, qid)]
            out.append(f"{name}: question_id {qid!r} (model {model!r}) has another question text on "
                       f"{len(rows)} row(s) ({_rows(rows)}) than on row {first} ({abbreviate(text)}); "
                       "those rows were skipped")
        return out

    def undefined_without_rows(self) -> list[dict]:
        """Rows of questions.csv for the questions none of whose rows could be scored (n = 0)."""
        return [{"model": m, "question_id": q, "n": 0, **({"question": text} if text is not None else {})}
                for (m, q), text in self.unscorable.items()]


def _rows(rows: list[int], shown: int = 10) -> str:
    more = f" and {len(rows) - shown} more" if len(rows) > shown else ""
    return "rows " + ", ".join(map(str, rows[:shown])) + more


def abbreviate(text: str, width: int = 40) -> str:
    """`text` quoted, cut to `width` characters."""
    return repr(text if len(text) <= width else text[:width - 1] + "…")


def strip_nul(chunk: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    """The chunk with NUL bytes removed from its text columns, and the (0-based) rows that had any."""
    hit = pd.Series(False, index=chunk.index)
    for col in TEXT_COLUMNS:
        if col in chunk.columns:
            values = chunk[col]
            has = values.map(lambda v: isinstance(v, str) and "\x00" in v).astype(bool)
            if has.any():
                chunk[col] = values.where(~has, values[has].str.replace("\x00", "", regex=False))
                hit |= has
    return chunk, [int(r) for r in chunk.index[hit]]


@dataclass(frozen=True)
class Labels:
    """Model labels: `default` for a table without a model column, `override` for every row."""

    default: str = "model"
    override: str | None = None

    def apply(self, raw: pd.DataFrame, name: str) -> tuple[pd.DataFrame, list[int]]:
        """The chunk with canonical columns, labels and NUL bytes stripped, and the rows that had any."""
        chunk = normalize_columns(raw, source=name, default_model=self.default)
        if self.override is not None:
            chunk["model"] = self.override
        return strip_nul(chunk)


def index_table(source, on: tuple[str, ...], name: str, labels: Labels = Labels(),
                rows: int = READ_ROWS, locate=None) -> TableIndex:
    """`locate(row, column)` -> (where, file column) of an empty cell of data row `row` when the
    user's file holds it elsewhere (nodes rebuilt from a pair-layout file: `PairEdges.locate`)."""
    idx = TableIndex()
    for raw in raw_chunks(source, rows):
        chunk, nul = labels.apply(raw, name)
        idx.nul_rows += [r + 1 for r in nul]
        for col in on:
            if col not in chunk.columns:
                raise SageInputError(f"missing column {col!r} needed for --on {col}; found {list(chunk.columns)}; "
                                     f"add it or drop {col!r} from --on")
        bad = pd.Series(False, index=chunk.index)
        for row in chunk.index[blank_ids(chunk)]:
            idx.report.bad_rows[int(row) + 1] = "column 'question_id' is empty"
            bad[row] = True
        for col in on:
            empty = chunk[col].isna() | chunk[col].astype(str).str.strip().eq("")
            for row in chunk.index[empty & ~bad]:
                found = locate(int(row), col) if locate is not None else None
                line, column = found if found is not None else (None, col)
                if line is not None:
                    idx.report.where[int(row) + 1] = line
                idx.report.bad_rows[int(row) + 1] = f"column {column!r} is empty or NaN"
            bad |= empty
        questions = chunk["question"] if "question" in chunk.columns else pd.Series(None, index=chunk.index)
        _check_question_texts(idx, chunk, questions, bad)
        for row, model, qid, is_bad, text in zip(chunk.index, chunk["model"], chunk["question_id"], bad, questions):
            key = (model, qid)
            idx.order.setdefault(key, len(idx.order))
            idx.last_row[key] = int(row)
            idx.valid_rows[key] = idx.valid_rows.get(key, 0) + (not is_bad)
            if idx.valid_rows[key] == 0 and qid != "":
                idx.unscorable.setdefault(key, None if pd.isna(text) else str(text))
            else:
                idx.unscorable.pop(key, None)
            idx.rows_per_model[model] = idx.rows_per_model.get(model, 0) + 1
            if is_bad:
                idx.skipped_per_model[model] = idx.skipped_per_model.get(model, 0) + 1
        idx.n_rows += len(chunk)
    if idx.n_rows == 0:
        raise SageInputError(f"{name}: the table has a header but no rows")
    idx.report.single_row_questions = [k for k, v in idx.valid_rows.items() if v == 1]
    return idx


def _check_question_texts(idx: TableIndex, chunk: pd.DataFrame, questions: pd.Series, bad: pd.Series) -> None:
    """Rows whose question text differs from the first text of their (model, question_id) are bad
    rows: one id is one question (one graph), so they are never merged silently."""
    for row, model, qid, text in zip(chunk.index, chunk["model"], chunk["question_id"], questions):
        if qid == "" or not isinstance(text, str) or not text.strip():
            continue
        text = text.strip()
        first = idx.question_text.setdefault((model, qid), (text, int(row) + 1))
        if first[0] != text and not bad[row]:
            idx.report.bad_rows[int(row) + 1] = (
                f"question_id {qid!r} has the question {abbreviate(text)} here but {abbreviate(first[0])} on row "
                f"{first[1]}; give each question its own question_id")
            idx.text_clashes.setdefault((model, qid), []).append(int(row) + 1)
            bad[row] = True


def question_chunks(source, idx: TableIndex, name: str, chunk_questions: int, labels: Labels = Labels(),
                    rows: int = READ_ROWS) -> Iterator[pd.DataFrame]:
    """Pass two: DataFrames of whole questions (canonical columns, unscorable rows dropped),
    `chunk_questions` questions each, rows in table order within a question."""
    bad = {r - 1 for r in idx.report.bad_rows}
    pending: dict = {}
    ready: list[pd.DataFrame] = []
    for raw in raw_chunks(source, rows):
        chunk, _ = labels.apply(raw, name)  # NUL bytes counted by the index
        keep = chunk[[r not in bad for r in chunk.index]]
        for key, frame in keep.groupby(["model", "question_id"], sort=False):
            pending.setdefault(key, []).append(frame)
        done = [key for key in pending if idx.last_row[key] <= chunk.index[-1]]
        for key in done:
            ready.append(pd.concat(pending.pop(key)))
            if len(ready) == chunk_questions:
                yield pd.concat(ready)
                ready = []
    ready += [pd.concat(frames) for frames in pending.values()]  # questions whose last rows were all empty
    if ready:
        yield pd.concat(ready)
