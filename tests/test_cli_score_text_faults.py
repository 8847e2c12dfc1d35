"""Texts a responses table must not merge or score silently (issue 54): one question_id with two
question texts (item 4), JSONL/Parquet texts that are not strings (item 13), NUL bytes in answers
(item 18). `sage score` in a real subprocess, and the readers it uses."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from fixtures_cli import assert_clean_error, run_sage

from sage.data.responses import read_responses
from sage.errors import SageInputError
from sage.scoring import score_responses

CHEAP = ("--metrics", "sge,bleu", "--sge-edges", "bleu", "--no-progress")
CLASH = ("question_id,question,answer\n"
         "999,Is it wrong to lie to a friend to spare their feelings?,yes it is\n"
         "999,Is it wrong to lie to a friend to spare their feelings?,yes it is wrong\n"
         "999,Should I return a wallet I found on the street?,return it\n"
         "999,Should I return a wallet I found on the street?,yes return it\n"
         "7,Is stealing wrong?,yes\n7,Is stealing wrong?,yes it is\n")


def test_one_question_id_with_two_question_texts_is_an_error_naming_both_rows(tmp_path):
    path = tmp_path / "clash.csv"
    path.write_text(CLASH)
    proc = run_sage("score", "--responses", path, *CHEAP, "--out", tmp_path / "o")
    assert_clean_error(proc, str(path), "row 3: question_id '999' has the question 'Should I return a wallet",
                       "on row 1", "'Is it wrong to lie to a friend to spare…'", "its own question_id",
                       "and 1 more rows", "--skip-invalid")


def test_under_skip_invalid_the_first_texts_rows_are_kept_and_the_others_skipped_and_counted(tmp_path):
    path = tmp_path / "clash.csv"
    path.write_text(CLASH)
    out = tmp_path / "o"
    proc = run_sage("score", "--responses", path, *CHEAP, "--skip-invalid", "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped_rows"] == [3, 4] and summary["models"]["clash"]["n_skipped_rows"] == 2
    [warning] = [w for w in summary["warnings"] if "question_id '999'" in w]
    assert "another question text on 2 row(s) (rows 3, 4) than on row 1" in warning and "skipped" in warning
    assert f"warning: {warning}" in proc.stderr and warning in (out / "summary.md").read_text()
    q = pd.read_csv(out / "questions.csv", dtype=str).set_index("question_id")
    assert q.loc["999", "question"].startswith("Is it wrong to lie") and q.loc["999", "n"] == "2"


@pytest.mark.parametrize("value, kind", [(5, "a number"), (["a", "list"], "a list"), ({"a": 1}, "an object"),
                                         (True, "a boolean")])
def test_a_jsonl_answer_that_is_not_a_string_is_one_line_naming_file_line_and_field(tmp_path, value, kind):
    path = tmp_path / "typed.jsonl"
    rows = [{"question_id": 1, "answer": "yes"}, {"question_id": 1, "answer": "yes it is"},
            {"question_id": 1, "model_output": value}]
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + json.dumps(rows[2]) + "\n")
    proc = run_sage("score", "--responses", path, *CHEAP, "--out", tmp_path / "o")
    assert_clean_error(proc, str(path), "line 4: field 'model_output' is " + kind, "not a string", "JSON string")
    with pytest.raises(SageInputError, match=r"line 4: field 'model_output'"):
        read_responses(path)  # the whole-file reader (pair layout, `sage.read_responses`) agrees


def test_a_parquet_answer_column_that_is_not_strings_is_one_line(tmp_path):
    path = tmp_path / "typed.parquet"
    pd.DataFrame({"question_id": ["q", "q"], "answer": [["a", "list"], ["b"]]}).to_parquet(path)
    assert_clean_error(run_sage("score", "--responses", path, *CHEAP, "--out", tmp_path / "o"),
                       str(path), "column 'answer' holds list<", "not strings")
    numbers = tmp_path / "numbers.parquet"
    pd.DataFrame({"question_id": ["q", "q"], "answer": [1, 2]}).to_parquet(numbers)
    assert_clean_error(run_sage("score", "--responses", numbers, *CHEAP, "--out", tmp_path / "o"),
                       "column 'answer' holds int64 values")


def test_numbers_in_a_csv_are_text_and_still_scored(tmp_path):
    path = tmp_path / "numbers.csv"
    path.write_text("question_id,answer\n1,5\n1,5\n1,6\n")
    out = tmp_path / "o"
    proc = run_sage("score", "--responses", path, *CHEAP, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert pd.read_csv(out / "questions.csv")["n"].tolist() == [3]


def test_nul_bytes_in_answers_are_removed_with_a_counted_warning(tmp_path):
    path = tmp_path / "nul.jsonl"
    rows = [("q", "yes\u0000 it is"), ("q", "yes it is"), ("q", "\u0000\u0000no"), ("r", "fine"), ("r", "fine too")]
    path.write_text("".join(json.dumps({"question_id": q, "answer": a}) + "\n" for q, a in rows))
    out = tmp_path / "o"
    proc = run_sage("score", "--responses", path, *CHEAP, "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    [warning] = [w for w in summary["warnings"] if "NUL" in w]
    assert "removed NUL bytes from the texts of 2 row(s) (rows 1, 3)" in warning
    assert f"warning: {warning}" in proc.stderr
    scored = pd.read_csv(out / "responses.csv")
    assert scored["answer"].tolist()[:3] == ["yes it is", "yes it is", "no"]
    assert "\x00" not in (out / "responses.csv").read_text()


def test_nul_bytes_are_removed_on_the_python_path_too():
    df = pd.DataFrame({"question_id": ["q", "q"], "answer": ["a\x00b", "ab"]})
    result = score_responses(df, metrics=("bleu",), progress=False)
    assert result.responses["answer"].tolist() == ["ab", "ab"]
    assert any("removed NUL bytes from the texts of 1 row(s) (rows 1)" in w for w in result.summary["warnings"])
