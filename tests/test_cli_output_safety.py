"""The output folder of a run (issue 54): no input overwritten (item 1), an output that cannot be
written is one line naming it (item 6), a failed write keeps the previous outputs (item 5), and one
run at a time per folder (item 16). Real subprocesses, real files."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_cli import REPO, assert_clean_error, run_sage

from sage.data.run_dir import LOCK_NAME, claim_run_dir

DEMO = REPO / "examples" / "responses_demo.csv"
CHEAP = ("--metrics", "sge,bleu", "--sge-edges", "bleu", "--no-progress")


def _table_with_a_bad_row(path: Path) -> bytes:
    data = DEMO.read_bytes() + b"q-extra,,,,,consistent-model,0,,\n"  # an empty answer: --skip-invalid drops it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name)


def test_an_out_that_would_overwrite_the_responses_is_refused(tmp_path):
    """`--responses D/responses.csv --out D` would replace the user's table with the scored rows
    (with --skip-invalid: fewer rows). Refused with one line, however the two paths are spelled."""
    data = _table_with_a_bad_row(tmp_path / "D" / "responses.csv")
    (tmp_path / "link").symlink_to(tmp_path / "D")
    for out in (tmp_path / "D", tmp_path / "link", "D/../D", "./D"):
        proc = run_sage("score", "--responses", "D/responses.csv", "--skip-invalid", *CHEAP, "--out", out,
                        cwd=tmp_path)
        assert_clean_error(proc, "D/responses.csv", "would overwrite this input (--responses)", "responses.csv",
                           "choose another --out")
    assert (tmp_path / "D" / "responses.csv").read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "D").iterdir()) == ["responses.csv"]
    # A parquet run writes responses.parquet: the CSV input in the same folder is safe.
    proc = run_sage("score", "--responses", "D/responses.csv", "--skip-invalid", *CHEAP, "--out", "D",
                    "--table-format", "parquet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "D" / "responses.csv").read_bytes() == data


def test_an_out_that_would_overwrite_other_inputs_is_refused(tmp_path):
    """The questions file of `sage score --model` and the input table of `sage generate`, too;
    refused before any model loads."""
    questions = tmp_path / "run" / "questions.csv"
    questions.parent.mkdir()
    questions.write_text("question_id,question\nq1,Is it wrong to lie?\n")
    proc = run_sage("score", "--model", "no-such-model", "--questions", questions, "--out", tmp_path / "run")
    assert_clean_error(proc, str(questions), "(--questions)", "questions.csv")
    answers = tmp_path / "run" / "rots.csv"
    answers.write_text("question_id,paraphrase_id,sample,paraphrase,answer\nq1,0,0,Is it wrong?,Yes.\n")
    proc = run_sage("generate", "rots", "--answers", answers, "--model", "no-such-model", "--out", tmp_path / "run")
    assert_clean_error(proc, str(answers), "(--answers)", "rots.csv")
    assert questions.read_text().startswith("question_id,question") and answers.read_text().startswith("question_id")


def test_annotate_import_and_agreement_refuse_to_write_over_the_labels_they_read(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("pair_id,alice,bob\np1,entailment,entailment\n")
    for args in (["import", labels, "--out", tmp_path / "sub" / ".." / "labels.csv"],
                 ["agreement", labels, "--out", tmp_path / "labels.csv"]):
        assert_clean_error(run_sage("annotate", *args), str(labels), "would overwrite this input (LABELS)")
    assert labels.read_text() == "pair_id,alice,bob\np1,entailment,entailment\n"


def _unwritable_outs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("not a folder")
    return {
        "read-only": Path("/sys/sage-test"),  # read-only for root too (EPERM / EROFS); chmod is not, for root
        "under a file": tmp_path / "a-file" / "run",  # NotADirectoryError
        "name too long": tmp_path / ("r" * 300),  # Errno 36, ENAMETOOLONG
    }


@pytest.mark.parametrize("case", ["read-only", "under a file", "name too long"])
def test_an_out_that_cannot_be_written_is_one_line_naming_it(tmp_path, case):
    out = _unwritable_outs(tmp_path)[case]
    if case == "read-only" and not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs here")
    proc = run_sage("score", "--responses", DEMO, *CHEAP, "--out", out)
    assert_clean_error(proc, f"{out}: cannot write it", "--out")
    # The same one path for `sage score --model` and `sage generate`, before any model loads.
    assert_clean_error(run_sage("score", "--model", "no-such-model", "--out", out), f"{out}: cannot write it")
    assert_clean_error(run_sage("generate", "answers", "--model", "no-such-model", "--out", out),
                       f"{out}: cannot write it")


def _limit_file_size(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return apply


def test_a_write_that_fails_part_way_keeps_the_previous_outputs(tmp_path):
    """A second run into the folder of a finished run, whose writes fail part way (the file-size
    limit: EFBIG, as a full disk gives ENOSPC): one line naming the file, exit 2, no traceback, the
    first run's outputs as they were and no temporary file left."""
    out = tmp_path / "run"
    assert run_sage("score", "--responses", DEMO, *CHEAP, "--out", out).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "sage", "score", "--responses", str(DEMO), *CHEAP, "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=REPO, check=False,
                          preexec_fn=_limit_file_size(4000))
    assert_clean_error(proc, f"{out}{os.sep}", "cannot write it (File too large)")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _leftovers(out) == []


def test_a_second_run_into_a_busy_folder_is_refused_and_the_lock_dies_with_its_holder(tmp_path):
    """Two runs into one --out at once would overwrite each other file by file. Another process
    holds the folder (the same lock helper): the run is refused with one line naming the folder
    and the lock; once the holder is killed, the lock it left never blocks a later run."""
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sage.data.run_dir import claim_run_dir\n"
                               f"with claim_run_dir({str(out)!r}):\n print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline() == "held\n"  # blocks until the lock is held: no sleep
        proc = run_sage("score", "--responses", DEMO, *CHEAP, "--out", out)
        assert_clean_error(proc, str(out), "another sage run is writing to this folder", LOCK_NAME)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # the refused run wrote nothing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    proc = run_sage("score", "--responses", DEMO, *CHEAP, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert LOCK_NAME not in proc.stdout  # not listed as an output


def test_the_lock_is_held_for_the_whole_run_within_one_process_too(tmp_path):
    out = tmp_path / "run"
    with claim_run_dir(out):
        assert_clean_error(run_sage("score", "--responses", DEMO, *CHEAP, "--out", out), LOCK_NAME)
    with claim_run_dir(out):  # released: the next claim gets it
        pass
