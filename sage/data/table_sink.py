"""A table written chunk by chunk (CSV or Parquet), published under its name only when complete.

Chunks go to `<name>.tmp<pid>`; `close()` renames it into place, so a run killed half way never
leaves a truncated table under the final name (the previous one, if any, stays until then).
Parquet chunks are cast to the first chunk's schema, so every row group of the file agrees.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from sage.errors import SageInputError

FORMATS = ("csv", "parquet")


class TableSink:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.format = self.path.suffix.lower().lstrip(".")
        if self.format not in FORMATS:
            raise SageInputError(f"{self.path}: unsupported output format; use .csv or .parquet")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
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
        if self.format == "csv":
            df.to_csv(self.tmp, mode="a" if self.rows else "w", header=not self.rows, index=False)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            if self._writer is None:
                table = pa.Table.from_pandas(df, preserve_index=False)
                self._schema = table.schema
                self._writer = pq.ParquetWriter(self.tmp, self._schema)
            else:
                table = pa.Table.from_pandas(df, schema=self._schema, preserve_index=False, safe=False)
            self._writer.write_table(table)
        self.rows += len(df)

    def close(self) -> Path | None:
        """Publish the table (None when nothing was appended)."""
        if self._writer is not None:
            self._writer.close()
        if not self.rows:
            return None
        os.replace(self.tmp, self.path)
        return self.path
