"""`sage score` through a real subprocess: outputs, the summary table, and bad input."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from fixtures_cli import assert_clean_error, run_sage

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "responses_demo.csv"


def test_score_cheap_metrics_writes_outputs(tmp_path):
    out = tmp_path / "run"
    proc = run_sage("score", "--responses", str(DEMO), "--metrics", "sge,bleu,rouge_l", "--sge-edges", "rouge_l",
                    "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    q = pd.read_csv(out / "questions.csv")
    assert len(q) == 10 and {"model", "question_id", "n", "sge_answer", "D_answer", "H_answer", "sge_rot", "bleu_answer", "rouge_l_rot"} <= set(q.columns)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["models"]) == {"consistent-model", "erratic-model"}
    cons = summary["models"]["consistent-model"]["metrics"]["sge_answer"]["mean"]
    erratic = summary["models"]["erratic-model"]["metrics"]["sge_answer"]["mean"]
    assert cons > erratic  # the demo's consistent model is the consistent one
    assert "SaGE consistency" in proc.stdout and "consistent-model" in proc.stdout
    assert (out / "summary.md").read_text().startswith("# SaGE consistency summary")


@pytest.mark.slow
def test_score_default_metrics_on_bundled_embedder(tmp_path):
    out = tmp_path / "run"
    proc = run_sage("score", "--responses", str(DEMO), "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    q = pd.read_csv(out / "questions.csv")
    for col in ("sge_answer", "cosine_answer", "bertscore_answer", "bleu_answer", "rouge_l_answer", "sge_rot"):
        assert q[col].notna().all(), col
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["similarity"]["embedder"] is None  # the bundled default
    assert s["models"]["consistent-model"]["metrics"]["sge_answer"]["mean"] > s["models"]["erratic-model"]["metrics"]["sge_answer"]["mean"]


@pytest.mark.parametrize(
    "content, needles",
    [
        (b"", ["is empty"]),
        ("question_id,answer\nq,caf\xe9\n".encode("latin-1"), ["line 2 is not valid UTF-8", "UTF-8"]),
        (b"question_id,text\nq,a\nq,b\n", ["missing column 'answer'"]),
        (b"question_id,answer\nq,a\nq,\nq,c\n", ["row 2: column 'answer' is empty or NaN", "--skip-invalid"]),
        (b"question_id,answer\nq,a\nq,b\nr,c\n", ["question_id 'r'", "single row"]),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(tmp_path, content, needles):
    p = tmp_path / "bad.csv"
    p.write_bytes(content)
    proc = run_sage("score", "--responses", str(p), "--metrics", "bleu", "--out", str(tmp_path / "o"))
    assert_clean_error(proc, str(p), *needles)


def test_malformed_jsonl(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"question_id": "q", "answer": "a"}\n{oops}\n')
    assert_clean_error(run_sage("score", "--responses", str(p), "--metrics", "bleu"), "line 2 is not valid JSON")


def test_unknown_embedder(tmp_path):
    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}  # online, a hub id is downloaded (tests/test_models_hub.py)
    proc = run_sage("score", "--responses", str(DEMO), "--embedder", "no-such-org/no-such-model",
                    "--metrics", "cosine", "--out", str(tmp_path / "o"), env=offline)
    assert_clean_error(proc, "'no-such-org/no-such-model' is not available locally", "local path")
    proc = run_sage("score", "--responses", str(DEMO), "--embedder", "no-such-model", "--metrics", "cosine",
                    "--out", str(tmp_path / "o"), env=offline)
    assert_clean_error(proc, "'no-such-model' is not available locally", "stsb-distilroberta-base-v2", "org/name")


def test_unknown_metric():
    assert_clean_error(run_sage("score", "--responses", str(DEMO), "--metrics", "sge,blue"), "unknown metric 'blue'")


def test_skip_invalid_counts_rows(tmp_path):
    p = tmp_path / "partial.csv"
    p.write_text("question_id,answer\nq,yes it is\nq,\nq,yes it is fine\nr,alone\n")
    out = tmp_path / "o"
    proc = run_sage("score", "--responses", str(p), "--metrics", "sge,bleu", "--sge-edges", "bleu",
                    "--skip-invalid", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    s = json.loads((out / "summary.json").read_text())
    m = s["models"]["partial"]
    assert m["n_skipped_rows"] == 1 and m["n_undefined"] == 1 and m["n_questions_scored"] == 1
    assert "1 rows skipped" in (out / "summary.md").read_text()


def _numeric_ids_with_blanks(tmp_path, blank_rows):
    """The demo table with numeric question ids (5884, 5885, ...) and blank ids on `blank_rows`."""
    df = pd.read_csv(DEMO)
    ids = pd.array([5884 + i // 4 for i in range(len(df))], dtype="Int64")
    df["question_id"] = ids
    df.loc[blank_rows, "question_id"] = None
    path = tmp_path / f"ids{len(blank_rows)}.csv"
    df.to_csv(path, index=False)
    return path


def test_blank_question_ids_are_bad_rows_not_dropped(tmp_path):
    """Issue 29, item 2: a blank id names its row (exit 2); with --skip-invalid the rows are skipped and
    counted, and the other ids stay strings ("5884", never "5884.0")."""
    path = _numeric_ids_with_blanks(tmp_path, [1, 5])
    proc = run_sage("score", "--responses", path, "--metrics", "sge", "--out", tmp_path / "o")
    assert_clean_error(proc, str(path), "row 2: column 'question_id' is empty", "and 1 more rows")
    one = _numeric_ids_with_blanks(tmp_path, [1])
    assert_clean_error(run_sage("score", "--responses", one, "--metrics", "sge", "--out", tmp_path / "o1"),
                       "row 2: column 'question_id' is empty")
    out = tmp_path / "skip"
    proc = run_sage("score", "--responses", path, "--metrics", "sge", "--skip-invalid", "--out", out,
                    "--no-progress")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"]["consistent-model"]["n_skipped_rows"] == 2 and summary["skipped_rows"] == [2, 6]
    q = pd.read_csv(out / "questions.csv", dtype=str)
    assert set(q["question_id"]) == {str(5884 + i) for i in range(10)}


def test_a_questions_file_with_a_blank_id_is_refused(tmp_path):
    from sage.data.questions import read_questions
    from sage.errors import SageInputError

    path = tmp_path / "questions.csv"
    path.write_text("question_id,question\nq1,Is lying wrong?\n,Is stealing wrong?\n")
    with pytest.raises(SageInputError, match=r"row 3 has an empty question_id"):
        read_questions(path)


def test_repeated_questions_are_merged_and_counted(tmp_path):
    from sage.data.questions import read_questions

    path = tmp_path / "questions.csv"
    path.write_text("question_id,question\nq1,Is lying wrong?\nq1,Is lying wrong?\nq2,Is stealing wrong?\n")
    df = read_questions(path)
    assert df["question_id"].tolist() == ["q1", "q2"] and df.attrs["repeated_questions_merged"] == 1


def test_click_usage_errors_are_one_line_too(tmp_path):
    """Issue 29: `sage score --responses DIR` (and any option click rejects) gives one error line,
    exit status 2, like every other bad input."""
    assert_clean_error(run_sage("score", "--responses", tmp_path), "'--responses'", "is a directory", "--help")
    assert_clean_error(run_sage("score", "--bogus"), "No such option '--bogus'")
    assert_clean_error(run_sage("nosuchcommand"), "No such command 'nosuchcommand'")


def test_no_progress_hides_every_bar(tmp_path):
    """Issue 29: --no-progress hides sage's bars and the libraries' (transformers' weight loading)."""
    proc = run_sage("score", "--responses", DEMO, "--metrics", "sge,cosine", "--out", tmp_path / "o", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "it/s" not in proc.stderr and "%|" not in proc.stderr and "Loading weights" not in proc.stderr


def test_a_command_prints_results_bars_and_warnings_and_info_lines_only_with_v(tmp_path):
    """Issue 31: by default no INFO lines and no model-loading bars, but sage's own bar; -v adds both."""
    proc = run_sage("score", "--responses", DEMO, "--metrics", "sge,cosine", "--out", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert "scoring:" in proc.stderr  # sage's progress bar
    assert not [ln for ln in proc.stderr.splitlines() if ln.startswith(("INFO", "WARNING bitsandbytes"))]
    assert "Loading weights" not in proc.stderr
    verbose = run_sage("-v", "score", "--responses", DEMO, "--metrics", "sge,cosine", "--out", tmp_path / "v")
    assert verbose.returncode == 0, verbose.stderr
    assert any(ln.startswith("INFO sage.") for ln in verbose.stderr.splitlines())
    assert "Loading weights" in verbose.stderr


def test_bad_input_leaves_no_output_folder_behind(tmp_path, countermoral_dir):
    """Issue 29: a command stopped by bad input (an unknown model name, a bad questions file) writes
    nothing: not even an empty output folder."""
    bad_questions = tmp_path / "questions.csv"
    bad_questions.write_text("id,text\nq1,Is it wrong to lie?\n")  # no 'question' column
    runs = {
        "score-model": ["score", "--model", "no-such-model", "--out"],
        "score-questions": ["score", "--questions", bad_questions, "--out"],
        "edit-model": ["edit", "--method", "rome", "--model", "no-such-model", "--limit", "1", "--data",
                       countermoral_dir, "--out"],
        "study-model": ["study", "edit-consistency", "--method", "rome", "--model", "no-such-model", "--limit", "1",
                        "--data", countermoral_dir, "--out"],
    }
    for name, args in runs.items():
        proc = run_sage(*args, tmp_path / name)
        assert proc.returncode == 2, (name, proc.stderr)
        assert not (tmp_path / name).exists(), name
