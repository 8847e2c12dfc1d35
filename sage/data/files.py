"""Reading user files with one-line errors that name the file, line and fix."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from sage.errors import SageInputError
from sage.outputs import write_text, write_whole


def read_text(path: str | Path, *, empty_hint: str = "give a file with content") -> str:
    """The file's text (UTF-8, BOM allowed); missing, empty and non-UTF-8 files raise clearly."""
    path = Path(path)
    if not path.exists():
        raise SageInputError(f"{path}: file not found")
    if path.is_dir():
        raise SageInputError(f"{path}: is a directory; pass a file")
    raw = path.read_bytes()
    if not raw.strip():
        raise SageInputError(f"{path}: the file is empty; {empty_hint}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SageInputError(
            f"{path}: line {line} is not valid UTF-8 (byte {exc.start}); re-save the file as UTF-8"
        ) from None


def json_kind(value) -> str:
    """What a parsed JSON value is, as an error message names it ("a number", "an object", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def check_text_fields(path: str | Path, lineno: int, record: dict, fields) -> None:
    """One line naming the file, line and field when a JSON text field holds a number, a list or an
    object: it would otherwise be scored as its Python repr (`"['a', 'list']"`). null is a missing text."""
    for name in fields:
        value = record.get(name)
        if value is None or isinstance(value, str) or (isinstance(value, float) and math.isnan(value)):
            continue
        shown = json.dumps(value, ensure_ascii=False)
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        raise SageInputError(f"{path}: line {lineno}: field {name!r} is {json_kind(value)} ({shown}), not a string; "
                             "write the text as a JSON string (in double quotes)")


def check_parquet_text_columns(path: str | Path, schema, fields) -> None:
    """One line naming the file and column when a Parquet text column is not a string column."""
    import pyarrow as pa

    for name in fields:
        if name not in schema.names:
            continue
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)
                or getattr(pa.types, "is_string_view", lambda _: False)(kind)):
            raise SageInputError(f"{path}: column {name!r} holds {kind} values, not strings; write the texts as a "
                                 "string column")


def read_jsonl_records(path: str | Path, text: str, text_fields=()) -> list[dict]:
    """One JSON object per non-blank line (`text_fields`: fields that must be strings or null)."""
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SageInputError(
                f"{path}: line {lineno} is not valid JSON ({exc.msg} at column {exc.colno}); "
                "each line must be one JSON object"
            ) from None
        if not isinstance(rec, dict):
            raise SageInputError(f"{path}: line {lineno} is not a JSON object; each line must be one object")
        check_text_fields(path, lineno, rec, text_fields)
        records.append(rec)
    return records


def _row_at(row: int, line: int) -> str:
    return f"row {row}" if row == line else f"row {row} (line {line})"


def check_complete_rows(path: str | Path, text: str, hint: str) -> None:
    """One line naming the file and row when a CSV table is cut short or malformed: the file ends
    inside a quoted field, a row has fewer or more fields than the header, or the last row has no
    line break after it (a file written whole always ends with one). Rows count the header as row
    1 and skip blank lines, as the table's other messages do; the line is given where it differs.
    `hint` says what to do (e.g. "re-run 'sage score' to write it again")."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    width, row, start, last = None, 0, 1, 1
    try:
        for record in reader:
            if not record:  # a blank line: skipped, as pandas skips it
                start = reader.line_num + 1
                continue
            row += 1
            if width is None:
                width = len(record)
            elif len(record) != width:
                where = _row_at(row, start)
                if len(record) < width:
                    raise SageInputError(f"{path}: {where} has {len(record)} of the header's {width} columns: the row "
                                         f"is cut short; {hint}")
                raise SageInputError(f"{path}: {where} has {len(record)} fields but the header has {width} columns; "
                                     f"check quoting on that line, or {hint}")
            last, start = start, reader.line_num + 1
    except csv.Error as exc:
        where = _row_at(row + 1, start)
        if "unexpected end of data" in str(exc):
            raise SageInputError(f"{path}: {where}: the file ends inside a quoted field: the row is cut short; "
                                 f"{hint}") from None
        raise SageInputError(f"{path}: {where}: malformed CSV ({exc}); check quoting on that line, or {hint}") from None
    if row > 1 and not text.endswith(("\n", "\r")):
        raise SageInputError(f"{path}: {_row_at(row, last)}: the file ends without a line break after "
                             f"this row, so the row may be cut short; {hint}")


ID_COLUMNS = {"question_id": str, "model": str}


def read_table(path: str | Path, *, as_strings: bool = False, empty_hint: str = "give a table with a header and rows",
               text_fields=(), complete_rows: str | None = None):
    """A CSV, JSONL or Parquet file as a DataFrame. `as_strings`: CSV cells as strings, no NaN.
    `text_fields`: JSONL fields and Parquet columns that must hold strings (CSV cells are text).
    `complete_rows`: a CSV written whole by sage must have every row complete (`check_complete_rows`);
    the string says what to do when one is not."""
    import pandas as pd

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json", ".parquet"):
        raise SageInputError(f"{path}: unsupported format {suffix or '(none)'}; use .csv, .jsonl or .parquet")
    if suffix == ".parquet":
        if not path.exists():
            raise SageInputError(f"{path}: file not found")
        try:
            import pyarrow.parquet as pq

            check_parquet_text_columns(path, pq.read_schema(path), text_fields)
            df = pd.read_parquet(path)
        except SageInputError:
            raise
        except Exception as exc:  # pyarrow raises several types for broken files
            raise SageInputError(f"{path}: not a readable Parquet file ({type(exc).__name__}); re-export it") from None
        return df.fillna("").astype(str) if as_strings else df
    text = read_text(path, empty_hint=empty_hint)
    if suffix in (".jsonl", ".json"):
        # JSON values keep their types (nested objects stay objects) whatever `as_strings` says.
        return pd.DataFrame.from_records(read_jsonl_records(path, text, text_fields))
    # Ids are text, always: a numeric-looking id column must not turn into floats (5884 -> 5884.0)
    # when a cell is blank; blank cells stay NaN so the callers' checks name them.
    if complete_rows is not None:
        check_complete_rows(path, text, complete_rows)
    options = {"dtype": str, "keep_default_na": False} if as_strings else {"dtype": ID_COLUMNS}
    try:
        return pd.read_csv(io.StringIO(text), **options)
    except pd.errors.ParserError as exc:
        raise SageInputError(f"{path}: malformed CSV ({str(exc).strip().splitlines()[0]}); check quoting on that line") from None
    except pd.errors.EmptyDataError:
        raise SageInputError(f"{path}: the file has no columns; {empty_hint}") from None


def _has_carriage_return(df) -> bool:
    if any("\r" in str(c) for c in df.columns):
        return True
    return any(df[c].map(lambda v: isinstance(v, str) and "\r" in v).any()
               for c in df.columns if df[c].dtype == object or str(df[c].dtype).startswith("str"))


def write_csv(df, tmp: str | Path) -> None:
    """`df.to_csv` without the index. pandas leaves a cell with a lone carriage return unquoted,
    which a reader then takes for the end of the row; a table holding one has every cell quoted."""
    quoting = csv.QUOTE_ALL if _has_carriage_return(df) else csv.QUOTE_MINIMAL
    df.to_csv(tmp, index=False, quoting=quoting)


def write_table(df, path: str | Path) -> Path:
    """Write a DataFrame as .csv, .jsonl or .parquet (by suffix), atomically (`sage.outputs.write_whole`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json", ".parquet"):
        raise SageInputError(f"{path}: unsupported format {suffix or '(none)'}; use .csv, .jsonl or .parquet")
    if suffix == ".csv":
        return write_whole(path, lambda tmp: write_csv(df, tmp))
    if suffix == ".parquet":
        return write_whole(path, lambda tmp: df.to_parquet(tmp, index=False))
    return write_whole(path, lambda tmp: df.to_json(tmp, orient="records", lines=True, force_ascii=False))


def json_ready(obj):
    """`obj` with every non-finite float (NaN, inf) as None and numpy scalars as Python numbers, so
    it serialises as strict JSON (`null`, never a bare `NaN` that other JSON readers reject)."""

    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def write_json(path: str | Path, obj, indent: int = 2) -> Path:
    """Strict JSON (`json_ready`), written atomically (`sage.outputs.write_whole`)."""
    text = json.dumps(json_ready(obj), indent=indent, allow_nan=False, ensure_ascii=False) + "\n"
    return write_text(path, text)
