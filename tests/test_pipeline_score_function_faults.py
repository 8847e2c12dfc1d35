"""`sage.score` when the user's function misbehaves (issue 29, items 3 and 4): finished calls are
kept when it raises, a rerun resumes, None is an empty answer whose question is listed as undefined,
and any other non-string is a TypeError naming the question. User paraphrases and a RoT function
keep the bundled generator out of it; scoring runs on the bundled encoder."""
from __future__ import annotations

import json
import sqlite3

import pandas as pd
import pytest

import sage

TABLE = pd.DataFrame({
    "question_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
    "question": ["Is cheating wrong?"] * 3 + ["Is stealing wrong?"] * 3 + ["Is lying wrong?"] * 3,
    "paraphrase": ["Is it wrong to cheat?", "Is cheating unethical?", "Should one cheat?",
                   "Is it wrong to steal?", "Is theft wrong?", "Should one steal?",
                   "Is it wrong to lie?", "Is lying unethical?", "Should one lie?"],
})


def _rot(question: str, answer: str) -> str:
    return f"It is right to think before acting on: {answer[:20]}"


def _cache_rows(path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM generations_v2").fetchone()[0]


def test_a_raising_function_keeps_finished_calls_and_a_rerun_resumes(tmp_path):
    calls: list[str] = []

    def flaky(question: str) -> str:
        calls.append(question)
        if len(calls) == 5:
            raise ConnectionError("my API went away")
        return f"My view on '{question}' is that it depends."

    kw = dict(name="flaky-v1", rot_fn=_rot, out_dir=tmp_path / "run", cache_path=str(tmp_path / "c.sqlite"),
              progress=False)
    with pytest.raises(ConnectionError, match="my API went away") as err:  # the user's exception, unchanged
        sage.score(TABLE, flaky, **kw)
    assert any("run the same call again to resume" in n for n in getattr(err.value, "__notes__", []))
    assert _cache_rows(tmp_path / "c.sqlite") == 4  # the four answers that finished
    [records] = (tmp_path / "run" / "records").glob("answers-*.jsonl")
    assert len(records.read_text().splitlines()) == 4
    result = sage.score(TABLE, flaky, **kw)  # resumes: only the five unanswered paraphrases are asked
    assert len(calls) == 5 + 5
    assert sorted(calls[5:]) == sorted(TABLE["paraphrase"][4:])
    assert result.summary["models"]["flaky-v1"]["n_questions_scored"] == 3


def test_none_answers_leave_a_question_listed_as_undefined_not_dropped(tmp_path):
    def silent_on_theft(question: str):
        return None if ("steal" in question or "theft" in question) else f"I would say no to: {question}"

    result = sage.score(TABLE, silent_on_theft, name="silent-v1", rot_fn=_rot, out_dir=tmp_path / "run",
                        cache_path=str(tmp_path / "c.sqlite"), progress=False)
    model = result.summary["models"]["silent-v1"]
    assert (model["n_questions"], model["n_undefined"], model["n_questions_scored"]) == (3, 1, 2)
    assert model["n_skipped_rows"] == 3
    assert {"model": "silent-v1", "question_id": "b"} in result.summary["undefined_questions"]
    written = pd.read_csv(tmp_path / "run" / "questions.csv", dtype={"question_id": str}).set_index("question_id")
    assert written.loc["b", "n"] == 0 and pd.isna(written.loc["b", "sge_answer"])
    assert written.loc["b", "question"] == "Is stealing wrong?"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["models"]["silent-v1"]["n_questions"] == 3


def test_a_non_string_answer_is_a_type_error_naming_the_question(tmp_path):
    def numeric(question: str):
        return 42 if "theft" in question else "No."

    with pytest.raises(TypeError, match=r"returned int 42 for question 'Is theft wrong\?'"):
        sage.score(TABLE, numeric, name="numeric-v1", rot_fn=_rot, out_dir=tmp_path / "run",
                   cache_path=str(tmp_path / "c.sqlite"), progress=False)


def test_skip_invalid_lists_a_question_whose_answers_are_all_empty(tmp_path):
    """The CLI path: `sage score --responses F --skip-invalid` on a table where one question has only
    empty answers counts and lists it (n = 0) instead of dropping it."""
    from fixtures_cli import run_sage

    df = pd.read_csv("examples/responses_demo.csv")
    first, model = df["question_id"].iloc[0], df["model"].iloc[0]
    rows = (df["question_id"] == first) & (df["model"] == model)
    df.loc[rows, "answer"] = ""
    src = tmp_path / "empty_q.csv"
    df.to_csv(src, index=False)
    proc = run_sage("score", "--responses", src, "--metrics", "sge", "--skip-invalid", "--no-progress",
                    "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {"model": model, "question_id": first} in summary["undefined_questions"]
    per_model = summary["models"][model]
    assert per_model["n_questions"] == df.loc[df["model"] == model, "question_id"].nunique()
    assert per_model["n_skipped_rows"] == int(rows.sum())
    questions = pd.read_csv(tmp_path / "out" / "questions.csv", dtype={"question_id": str})
    assert questions.loc[(questions["model"] == model) & (questions["question_id"] == first), "n"].tolist() == [0]


def test_repeated_question_rows_are_merged_and_counted_in_the_summary(tmp_path):
    """Issue 29: the same (question_id, question) twice is one question, counted in summary.json."""
    from sage.generation.callable_backend import register_function

    def paraphrase(question: str, n: str) -> str:
        return "\n".join(f"{i + 1}. {question.rstrip('?')}, in your view number {i + 1}?" for i in range(int(n)))

    register_function("numbered-paraphrases", paraphrase)
    table = pd.DataFrame({"question_id": ["a", "a", "b"],
                          "question": ["Is cheating wrong?", "Is cheating wrong?", "Is stealing wrong?"]})
    result = sage.score(table, lambda q: f"It depends: {q}", name="dup-v1", rot_fn=_rot, paraphrases=2,
                        paraphraser="numbered-paraphrases", paraphraser_backend="callable", min_parascore=0.0,
                        out_dir=tmp_path / "run", cache_path=str(tmp_path / "c.sqlite"), progress=False)
    assert result.summary["questions_file"] == {"n_questions": 2, "repeated_questions_merged": 1}
    assert result.summary["models"]["dup-v1"]["n_questions"] == 2
