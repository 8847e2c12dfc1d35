"""Question files for generation: the user's CSV/JSONL/Parquet, or the built-in demo set."""
from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

from sage.data import files
from sage.data.catalog import QUESTION_SETS
from sage.data.download import ensure_dataset
from sage.errors import SageInputError

log = logging.getLogger(__name__)


def read_string_table(path: str | Path, what: str = "file"):
    """A .csv / .jsonl / .parquet table (CSV cells as strings); one clear error otherwise."""
    return files.read_table(path, as_strings=True, empty_hint=f"give a {what} with a header and rows")


def demo_questions_path() -> Path:
    return Path(str(resources.files("sage").joinpath("resources/demo_questions.csv")))


def questions_path(value: str | Path) -> Path:
    """A questions file: an existing path, or a registered question set (`sage data list`),
    downloaded into the sage cache when missing and online."""
    path = Path(value).expanduser()
    if path.exists():
        return path

    name = str(value)
    if name not in QUESTION_SETS:
        raise SageInputError(
            f"questions {name!r}: no such file, and not a question set ({', '.join(QUESTION_SETS.names())}); "
            "pass a questions file (question_id, question) or one of those names (`sage data list`)"
        )

    qs = QUESTION_SETS.get(name)
    return ensure_dataset(qs.dataset, files=[qs.file], hint=", or pass --questions FILE") / qs.file


# The SaGE authors' column names for paraphrases and their ParaScore.
_AUTHOR_COLUMNS = {"paraphrased": "paraphrase", "score": "paraphrase_score"}


def read_questions(path: str | Path | None = None):
    """Questions as a DataFrame with string `question_id`, `question` and, if the file has
    them, user-supplied paraphrases in `paraphrase` (one row per paraphrase; the authors'
    `paraphrased`/`score` columns are read as `paraphrase`/`paraphrase_score`).

    No path: the built-in demo set of moral questions.
    """
    path = Path(path) if path is not None else demo_questions_path()
    return questions_frame(read_string_table(path, "questions file"), f"questions file {str(path)!r}")


def questions_frame(obj, source: str = "questions"):
    """A list of question strings or a DataFrame with a `question` column, checked: string ids
    (q0001, ... when absent), no empty question, no id used for two questions."""
    import pandas as pd

    if isinstance(obj, pd.DataFrame):
        df = obj.copy()
    else:
        items = list(obj)
        if not items or not all(isinstance(q, str) for q in items):
            raise SageInputError(f"{source}: give a non-empty list of question strings or a table with a 'question' "
                                 "column")
        df = pd.DataFrame({"question": items})
    if "paraphrased" in df.columns and "paraphrase" not in df.columns:
        df = df.rename(columns={k: v for k, v in _AUTHOR_COLUMNS.items() if v not in df.columns})
    if "question" not in df.columns:
        raise SageInputError(
            f"{source} has no 'question' column (columns: {', '.join(map(str, df.columns))}); "
            "add a header row with 'question_id,question'"
        )
    if "question_id" not in df.columns:
        df.insert(0, "question_id", [f"q{i + 1:04d}" for i in range(len(df))])
    df = df.reset_index(drop=True)
    ids = df["question_id"]
    df["question_id"] = ids.astype(str).str.strip().where(ids.notna(), "")
    blank = df.index[df["question_id"] == ""].tolist()
    if blank:
        raise SageInputError(f"{source}: row {blank[0] + 2} has an empty question_id; fill it in, or drop the "
                             "question_id column to number the questions q0001, q0002, ...")
    df["question"] = df["question"].where(df["question"].notna(), "").astype(str).str.strip()
    empty = df.index[df["question"] == ""].tolist()
    if empty:
        raise SageInputError(f"{source}: row {empty[0] + 2} has an empty question; fill it or delete the row")
    clash = df.groupby("question_id")["question"].nunique()
    if (clash > 1).any():
        qid = clash.index[clash > 1][0]
        raise SageInputError(f"{source}: question_id {qid!r} is used for different questions; make ids unique")
    if "paraphrase" not in df.columns:
        repeated = int(df.duplicated("question_id").sum())
        df = df.drop_duplicates("question_id")
        if repeated:  # the same id and text twice: one question, said once and counted in the run summary
            log.warning("%s: %d repeated question row(s) (same question_id and text) merged", source, repeated)
        df.attrs["repeated_questions_merged"] = repeated
    return df.reset_index(drop=True)
