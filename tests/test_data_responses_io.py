"""The responses table: formats, the SaGE authors' column names, validation and clear errors."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sage.data.responses import read_responses, validate, write_responses
from sage.errors import SageInputError


def _table():
    return pd.DataFrame({
        "question_id": ["a", "a", "b", "b"],
        "question": ["Q a"] * 2 + ["Q b"] * 2,
        "paraphrase_id": [0, 1, 0, 1],
        "paraphrase": ["pa0", "pa1", "pb0", "pb1"],
        "paraphrase_score": [0.9, 0.85, 0.8, 0.95],
        "model": ["m"] * 4,
        "sample": [0] * 4,
        "answer": ["yes, it is fine", "no — never ünicode", "maybe", "it depends"],
        "rot": ["r1", "r2", "r3", "r4"],
    })


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_round_trip(tmp_path, suffix):
    df = _table()
    path = write_responses(df, tmp_path / f"t{suffix}")
    back = read_responses(path)
    pd.testing.assert_frame_equal(back[df.columns].reset_index(drop=True), df, check_dtype=False)


def test_a_lone_carriage_return_in_a_text_survives_a_csv_round_trip(tmp_path):
    df = _table()
    df.loc[1, "answer"] = "\rstarts with a carriage return"
    df.loc[2, "answer"] = "one\rtwo\r\nthree"
    back = read_responses(write_responses(df, tmp_path / "t.csv"))
    assert len(back) == 4 and back["answer"].tolist() == df["answer"].tolist()


def test_minimal_table_without_paraphrase_columns(tmp_path):
    p = tmp_path / "samples.csv"
    p.write_text("question,answer\nIs it ok?,yes\nIs it ok?,no\n")
    df = read_responses(p)
    assert df["question_id"].nunique() == 1
    assert set(df["model"]) == {"model"} and list(df["sample"]) == [0, 0]


def test_authors_columns_read_as_is(quality100):
    df = read_responses(quality100 / "q100_gpt_3.5_rot.csv")
    assert {"paraphrase", "paraphrase_score", "answer", "rot"} <= set(df.columns)
    assert len(df) == 500 and df["question_id"].nunique() == 100


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("empty.csv", b"", "empty"),
        ("blank.csv", b"  \n", "empty"),
        ("latin1.csv", "question_id,answer\nq,caf\xe9\n".encode("latin-1"), "line 2 is not valid UTF-8"),
        ("noanswer.csv", b"question_id,text\nq,hi\n", "missing column 'answer'"),
        ("nokey.csv", b"answer\nhi\n", "missing column 'question_id'"),
        ("header.csv", b"question_id,answer\n", "no rows"),
        ("bad.jsonl", b'{"question_id": "q", "answer": "a"}\n{"question_id": \n', "line 2 is not valid JSON"),
        ("list.jsonl", b'[1, 2]\n', "line 1 is not a JSON object"),
        ("x.txt", b"a", "unsupported format"),
    ],
)
def test_bad_files_give_one_clear_line(tmp_path, name, content, expected):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(SageInputError) as err:
        read_responses(p)
    msg = str(err.value)
    assert expected in msg and str(p) in msg and "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(SageInputError, match="file not found"):
        read_responses(tmp_path / "nope.csv")


def test_validate_finds_nan_empty_and_single_rows():
    df = _table()
    df.loc[1, "answer"] = np.nan
    df.loc[2, "rot"] = "   "
    report = validate(df, ("answer", "rot"))
    assert report.bad_rows == {2: "column 'answer' is empty or NaN", 3: "column 'rot' is empty or NaN"}
    # after removing the bad rows each question keeps one row
    assert sorted(report.single_row_questions) == [("m", "a"), ("m", "b")]
    msg = report.first_problem("f.csv")
    assert "row 2" in msg and "--skip-invalid" in msg
