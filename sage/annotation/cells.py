"""Spreadsheet cells of the annotators' CSV: formulas neutralised on export, texts restored on import.

A cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return is read as a formula by
Excel, LibreOffice and Google Sheets (`=HYPERLINK(...)`, `+cmd|...`, `-2+3`, `@SUM(...)`). Following
OWASP's CSV-injection guidance, the export writes such a cell with one single quote in front
(`'=HYPERLINK(...)`), which spreadsheets show as text. A cell that already begins with quotes
followed by one of those characters (`'=x`) gets one more quote as well, so that `restore` (drop
exactly one quote from a cell of the form `'+[=+\\-@\\t\\r]...`) is the exact inverse of
`neutralise` on every text. Only the spreadsheet-facing pairs.csv is neutralised; JSONL, Label
Studio JSON and the importer's own tables keep the texts as they are.

Spreadsheets treat the leading quote differently when they save (Excel and Google Sheets drop it,
LibreOffice may keep it), so the importer does not rely on the file alone: a row's texts are the
variant (`text_variants`: restored, as read, or with the quote a spreadsheet dropped) whose
`content_hash` equals the one exported, which gives back the original texts exactly.
"""
from __future__ import annotations

import re
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NEUTRALISED = re.compile(r"'+[=+\-@\t\r]")


def needs_neutralising(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith(FORMULA_START) or bool(_NEUTRALISED.match(value)))


def neutralise(value: Any) -> Any:
    """The cell as the export writes it: one `'` in front of a formula-like text; others unchanged."""
    return "'" + value if needs_neutralising(value) else value


def restore(value: Any) -> Any:
    """The inverse of `neutralise`: one leading `'` dropped from a cell that `neutralise` wrote."""
    return value[1:] if isinstance(value, str) and _NEUTRALISED.match(value) else value


def text_variants(raw: Any) -> list[Any]:
    """What a text read from a spreadsheet CSV may have been on export: restored, as read, or with
    the leading quote a spreadsheet dropped when it saved the file."""
    if not isinstance(raw, str):
        return [raw]
    return list(dict.fromkeys([restore(raw), raw, "'" + raw]))
