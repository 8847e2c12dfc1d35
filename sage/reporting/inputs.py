"""What `sage report` reads besides questions.csv, checked before use: summary.json of `sage score`
and correlation.json of `sage correlate`.

A file of the wrong shape (a JSON list, `{"models": 5}`, a CI bound that is a string) is one line
naming the file and the field (`models.m1.metrics.sge_answer.mean`) and what to do, never an
AttributeError half way through the report. Undefined statistics may be null or NaN; both are read
as NaN. Fields the report does not use are not checked.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from sage.data.files import json_kind
from sage.errors import SageInputError

log = logging.getLogger(__name__)

_SUMMARY_FIX = "re-run 'sage score', or remove the file (the report then bootstraps its CIs from questions.csv)"
_CORR_FIX = "re-run 'sage correlate', or pass --correlation with the correlation.json it wrote"
CI_FIELDS = ("mean", "ci_low", "ci_high")


class _Checker:
    def __init__(self, path: Path, fix: str):
        self.path, self.fix = path, fix

    def fail(self, field: str, problem: str) -> SageInputError:
        where = f"field {field!r}" if field else "the top level"
        return SageInputError(f"{self.path}: {where} {problem}; {self.fix}")

    def want(self, value: Any, field: str, kind: type | tuple, what: str) -> Any:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            shown = json.dumps(value)[:40] if isinstance(value, (str, int, float)) else ""
            raise self.fail(field, f"is {json_kind(value)}{f' ({shown})' if shown else ''}, not {what}")
        return value

    def number(self, value: Any, field: str) -> float:
        """A finite or undefined number: null / NaN are undefined (NaN)."""
        if value is None:
            return math.nan
        return float(self.want(value, field, (int, float), "a number (or null)"))

    def count(self, value: Any, field: str) -> int:
        if value is None:
            return 0
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        n = self.want(value, field, int, "a whole number")
        if n < 0:
            raise self.fail(field, f"is {n}, not a count (>= 0)")
        return n

    def mapping(self, obj: dict, key: str, field: str, required: bool = False) -> dict:
        if key not in obj:
            if required:
                raise self.fail(field, "is missing")
            return {}
        return self.want(obj[key], field, dict, "an object")


def _load(path: Path, fix: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SageInputError(f"{path}: unreadable JSON ({exc}); {fix}") from None
    except OSError as exc:
        raise SageInputError(f"{path}: cannot read it ({exc.strerror or exc}); {fix}") from None


def read_summary(path: Path) -> dict:
    """summary.json of `sage score`: `models.<model>.metrics.<column>` = {mean, ci_low, ci_high, n}
    (numbers or null), optional `config` and `provenance` objects. Returns it with undefined
    statistics as NaN and counts as ints."""
    c = _Checker(path, _SUMMARY_FIX)
    raw = c.want(_load(path, _SUMMARY_FIX), "", dict, "an object (the summary.json written by 'sage score')")
    c.mapping(raw, "config", "config")
    c.mapping(raw, "provenance", "provenance")
    models = c.mapping(raw, "models", "models", required=True)
    for model, entry in models.items():
        entry = c.want(entry, f"models.{model}", dict, "an object")
        if "n_questions" in entry:
            entry["n_questions"] = c.count(entry["n_questions"], f"models.{model}.n_questions")
        for metric, stat in c.mapping(entry, "metrics", f"models.{model}.metrics").items():
            field = f"models.{model}.metrics.{metric}"
            if stat is None:
                continue
            stat = c.want(stat, field, dict, "an object {mean, ci_low, ci_high, n}")
            for key in CI_FIELDS:
                if key not in stat:
                    raise c.fail(f"{field}.{key}", "is missing")
                stat[key] = c.number(stat[key], f"{field}.{key}")
            stat["n"] = c.count(stat.get("n"), f"{field}.n")
    return raw


def read_correlation(path: Path) -> dict:
    """correlation.json of `sage correlate`: `correlations` (a list of {metric, method, r, ci95_low,
    ci95_high}), `methods` and `metrics` (lists of names), optional `counts` object."""
    c = _Checker(path, _CORR_FIX)
    raw = c.want(_load(path, _CORR_FIX), "", dict, "an object (the correlation.json written by 'sage correlate')")
    if "correlations" not in raw:
        raise SageInputError(f"{path}: no 'correlations' key; pass the correlation.json of 'sage correlate'")
    recs = c.want(raw["correlations"], "correlations", list, "a list")
    for key in ("methods", "metrics"):
        names = c.want(raw.setdefault(key, []), key, list, "a list of names")
        for i, name in enumerate(names):
            c.want(name, f"{key}[{i}]", str, "a name (a string)")
    c.mapping(raw, "counts", "counts")
    for i, rec in enumerate(recs):
        field = f"correlations[{i}]"
        c.want(rec, field, dict, "an object {metric, method, r, ci95_low, ci95_high}")
        for key in ("metric", "method"):
            c.want(rec.get(key), f"{field}.{key}", str, "a name (a string)")
        for key in ("r", "ci95_low", "ci95_high"):
            rec[key] = c.number(rec.get(key), f"{field}.{key}")
    return raw


def check_question_counts(summary: dict | None, questions, qpath: Path, spath: Path) -> None:
    """One line where questions.csv holds fewer or more questions of a model than summary.json
    counted: the table was cut at a row boundary, or the two files are from different runs."""
    if not summary:
        return
    have = questions.groupby("model", sort=False).size().to_dict()
    for model, entry in summary["models"].items():
        expected = entry.get("n_questions")
        got = int(have.get(str(model), 0))
        if expected is not None and got != expected:
            raise SageInputError(f"{qpath}: {got} rows of model {model!r} but {spath} counts {expected} questions: "
                                 f"questions.csv is cut short or from another run; re-run 'sage score' (or remove "
                                 f"summary.json to report on questions.csv alone)")
