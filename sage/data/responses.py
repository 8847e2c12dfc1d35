"""The responses table: one row per (question, paraphrase, sample).

Canonical columns: question_id, question, paraphrase_id, paraphrase, paraphrase_score, model,
sample, answer, rot. Only a question key (question_id or question) and an answer are required.
The SaGE authors' released names (paraphrased, score, model_output) are read as they are.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sage.data import files
from sage.errors import SageInputError

log = logging.getLogger(__name__)

CANONICAL_COLUMNS = [
    "question_id",
    "question",
    "paraphrase_id",
    "paraphrase",
    "paraphrase_score",
    "model",
    "sample",
    "answer",
    "rot",
]
TEXT_COLUMNS = ("answer", "rot")
# Names used by the SaGE authors' released files (priyanshul-govil/SaGE, data/quality100).
COLUMN_ALIASES = {"paraphrased": "paraphrase", "score": "paraphrase_score", "model_output": "answer"}
# Fields that hold texts, in either layout (`sage.data.pair_layout`): in JSONL and Parquet files they
# must be strings (a number or a list would be scored as its repr); CSV cells are text anyway.
TEXT_FIELDS = ("question", "paraphrase", "paraphrased", "answer", "model_output", "rot",
               "answer_1", "answer_2", "model_output_1", "model_output_2", "paraphrase_1", "paraphrase_2",
               "paraphrased_1", "paraphrased_2", "rot_1", "rot_2")


def read_responses_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV, JSONL or Parquet responses file into a DataFrame with clear errors."""
    return files.read_table(path, empty_hint="give a responses file with a header and rows", text_fields=TEXT_FIELDS)


def normalize_columns(df: pd.DataFrame, source: str = "responses", default_model: str = "model") -> pd.DataFrame:
    """Rename known aliases to canonical names and check the required columns exist."""
    df = df.copy()
    df.columns = [str(c).strip() for c in df.columns]
    renames = {a: c for a, c in COLUMN_ALIASES.items() if a in df.columns and c not in df.columns}
    df = df.rename(columns=renames)
    if "question_id" not in df.columns:
        if "question" not in df.columns:
            raise SageInputError(
                f"{source}: missing column 'question_id' (or 'question'); found {list(df.columns)}; "
                "add a column that identifies the question of each row"
            )
        # Stable ids derived from the question text, so reruns and joins agree.
        df["question_id"] = [
            hashlib.sha1(str(q).encode()).hexdigest()[:10] for q in df["question"]
        ]
    if "answer" not in df.columns:
        raise SageInputError(
            f"{source}: missing column 'answer' (or 'model_output'); found {list(df.columns)}; "
            "add the model's answers in a column named 'answer'"
        )
    if df.empty:
        raise SageInputError(f"{source}: the table has a header but no rows")
    if "model" not in df.columns:
        df["model"] = default_model
    if "sample" not in df.columns:
        df["sample"] = 0
    # Ids are strings, always; a blank id becomes "" (never "nan"), which `blank_ids` finds and the
    # checks report as a bad row.
    ids = df["question_id"]
    df["question_id"] = ids.astype(str).str.strip().where(ids.notna(), "")
    df["model"] = df["model"].fillna(default_model).astype(str)
    return df


def blank_ids(df: pd.DataFrame) -> pd.Series:
    """Rows whose question_id is blank (after `normalize_columns`)."""
    return df["question_id"].eq("")


def response_keys(df: pd.DataFrame) -> list[str]:
    """Each row's key inside its question, `p<paraphrase_id>.s<sample>` (pair ids are built from it).

    Without a paraphrase_id column, rows of one (model, question_id, sample) are numbered in order.
    """
    sample = df["sample"] if "sample" in df.columns else pd.Series(0, index=df.index)
    if "paraphrase_id" in df.columns:
        para = df["paraphrase_id"]
    else:
        model = df["model"] if "model" in df.columns else pd.Series("", index=df.index)
        para = pd.DataFrame({"m": model, "q": df["question_id"], "s": sample}).groupby(
            ["m", "q", "s"], sort=False).cumcount()
    return [f"p{p}.s{s}" for p, s in zip(para, sample)]


def read_responses(path: str | Path) -> pd.DataFrame:
    """Read a responses table from .csv, .jsonl or .parquet; canonical column names. A file in
    the SaGE authors' pair layout is read back into one row per node (`sage.data.pair_layout`)."""
    return load_responses(path)[0]


def load_responses(path: str | Path, default_model: str = "model"):
    """(responses table, `PairEdges` of a pair-layout file or None)."""
    return as_responses(read_responses_table(path), source=str(path), default_model=default_model)


def as_responses(df: pd.DataFrame, source: str = "responses", default_model: str = "model"):
    """A table in either layout -> (one row per node with canonical columns, `PairEdges` or None)."""
    from sage.data.pair_layout import is_pair_layout, nodes_from_pairs

    if is_pair_layout(df):
        nodes, edges = nodes_from_pairs(df, source)
        return normalize_columns(nodes, source=source, default_model=default_model), edges
    return normalize_columns(df, source=source, default_model=default_model), None


def canonical_order(df: pd.DataFrame) -> pd.DataFrame:
    """The table with the canonical columns first, the others after them in their order."""
    return df[[c for c in CANONICAL_COLUMNS if c in df.columns] + [c for c in df.columns if c not in CANONICAL_COLUMNS]]


def write_responses(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a responses table; the format follows the suffix. Canonical columns come first."""
    return files.write_table(canonical_order(df), path)


@dataclass
class ValidationReport:
    """Rows and questions that cannot be scored, with reasons (row numbers are 1-based data rows)."""

    bad_rows: dict[int, str] = field(default_factory=dict)
    single_row_questions: list[tuple[str, str]] = field(default_factory=list)  # (model, question_id)
    # row -> where it is in the user's file when that is not "row N" (a pair-layout file's line and column)
    where: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.bad_rows and not self.single_row_questions

    def first_problem(self, source: str) -> str:
        if self.bad_rows:
            row, why = next(iter(self.bad_rows.items()))
            more = f" (and {len(self.bad_rows) - 1} more rows)" if len(self.bad_rows) > 1 else ""
            return (f"{source}: {self.where.get(row, f'row {row}')}: {why}{more}; fix or remove these rows, "
                    "or pass --skip-invalid to skip and count them")
        model, qid = self.single_row_questions[0]
        more = (
            f" (and {len(self.single_row_questions) - 1} more questions)"
            if len(self.single_row_questions) > 1
            else ""
        )
        return (
            f"{source}: question_id {qid!r} (model {model!r}) has a single row, so its consistency is undefined{more}; "
            "add more samples or paraphrases, or pass --skip-invalid to report it as undefined"
        )


def validate(df: pd.DataFrame, on: tuple[str, ...]) -> ValidationReport:
    """Find rows with missing/empty texts in the columns to score and single-row questions."""
    report = ValidationReport()
    for pos in blank_ids(df).to_numpy().nonzero()[0]:
        report.bad_rows[int(pos) + 1] = "column 'question_id' is empty"
    for col in on:
        if col not in df.columns:
            raise SageInputError(
                f"missing column {col!r} needed for --on {col}; found {list(df.columns)}; "
                f"add it or drop {col!r} from --on"
            )
        values = df[col]
        empty = values.isna() | values.astype(str).str.strip().eq("")
        for pos in empty.to_numpy().nonzero()[0]:
            report.bad_rows.setdefault(int(pos) + 1, f"column {col!r} is empty or NaN")
    good = df.iloc[[i for i in range(len(df)) if i + 1 not in report.bad_rows]]
    sizes = good.groupby(["model", "question_id"], sort=False).size()
    report.single_row_questions = [k for k, v in sizes.items() if v == 1]
    return report
