"""A table written chunk by chunk (CSV or Parquet), published under its name only when complete.

Chunks go to `<name>.tmp<pid>` (`sage.outputs.temp_path`); `close()` flushes it to disk and renames
it into place (`sage.outputs.publish`), so a run killed half way never leaves a truncated table
under the final name (the previous one, if any, stays until then). A failed write (a full disk)
removes the temporary file and is one line naming the table (`sage.outputs.OutputError`); so does
`discard()`, for a run that stops before the table is complete. Parquet chunks are cast to the
first chunk's schema, so every row group of the file agrees.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from sage.errors import SageInputError
from sage.outputs import publish, temp_path, writing

FORMATS = ("csv", "parquet")


class TableSink:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.format = self.path.suffix.lower().lstrip(".")
        if self.format not in FORMATS:
            raise SageInputError(f"{self.path}: unsupported output format; use .csv or .parquet")
        with writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temp_path(self.path)
        self.rows = 0
        self._writer = None
        self._schema = None
        self._columns: list | None = None

    def append(self, df: pd.DataFrame) -> None:
        if df is None or df.empty:
            return
        if self._columns is None:
            self._columns = list(df.columns)
        df = df.reindex(columns=self._columns)  # every chunk in the first chunk's column order
        try:
            with writing(self.path):
                self._append(df)
        except BaseException:
            self.discard()
            raise
        self.rows += len(df)

    def _append(self, df: pd.DataFrame) -> None:
        if self.format == "csv":
            df.to_csv(self.tmp, mode="a" if self.rows else "w", header=not self.rows, index=False)
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is None:
            table = pa.Table.from_pandas(df, preserve_index=False)
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self.tmp, self._schema)
        else:
            table = pa.Table.from_pandas(df, schema=self._schema, preserve_index=False, safe=False)
        self._writer.write_table(table)

    def close(self) -> Path | None:
        """Publish the table (None when nothing was appended)."""
        try:
            with writing(self.path):
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
                if not self.rows:
                    return None
                return publish(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Drop what was written so far; the previous table under the name, if any, stays."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # a writer that failed part way may not close cleanly; its file goes anyway
                pass
            self._writer = None
        self.tmp.unlink(missing_ok=True)
        self.rows = 0
