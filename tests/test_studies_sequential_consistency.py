"""The sequential edit-consistency study (issue 32 §3) end to end on the bundled model: ROME edits two
entries one after another; at each checkpoint the texts of the edited actions so far and of a control
entry from the other subset are collected, scored and compared with the unedited model's."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from sage.editing.handles import state_hashes
from sage.errors import SageInputError
from sage.studies.edit_consistency import METRICS, PROBES, StudyConfig
from sage.studies.sequential_consistency import SequentialStudyConfig, run_sequential_study

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def _config(countermoral_dir, out):
    study = StudyConfig(
        methods=("rome",), frameworks=("deontology",), limit=2, data=str(countermoral_dir), out=str(out), k=2,
        paraphrase_tokens=96, paraphrase_attempts=1, completion_tokens=8, answer_tokens=24, rot_tokens=16,
        n_boot=200, overrides={"rome": {"v_steps": 12, "n_context": 2, "covariance": "identity"}})
    return SequentialStudyConfig(study, checkpoints=(1, 2), controls=1, drift_texts=4)


def edited_uids(recs):
    return {r["uid"] for r in recs if r["group"] == "edited"}


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_texts_at_each_checkpoint_scored_against_the_unedited_model(bundled_lm, countermoral_dir, tmp_path):
    before = state_hashes(bundled_lm.model)
    summary = run_sequential_study(_config(countermoral_dir, tmp_path), lm=bundled_lm)
    assert state_hashes(bundled_lm.model) == before  # the sequence is undone bit for bit
    assert summary["n_entries"] == {"edited": 2, "control": 1}
    recs = _lines(tmp_path / "records" / "rome-sequential.jsonl")
    got = sorted((r["step"], r["group"]) for r in recs)
    assert got == [(1, "control"), (1, "edited"), (2, "control"), (2, "edited"), (2, "edited")]
    control = [r for r in recs if r["group"] == "control"]
    assert all(r["uid"] not in edited_uids(recs) for r in control)
    rots = _lines(tmp_path / "records" / "rome-sequential.rots.jsonl")
    assert {r["key"] for r in rots} == {r["key"] for r in recs}
    assert all(len(r["rots"]) == len(next(x for x in recs if x["key"] == r["key"])["answers"]) for r in rots)

    scores = pd.read_csv(tmp_path / "scores.csv")
    assert set(scores["state"]) == {"pre", "rome@1", "rome@2"}
    assert set(scores["probe"]) == set(PROBES) and set(scores["metric"]) == set(METRICS)
    changes = pd.read_csv(tmp_path / "changes.csv")
    assert set(map(tuple, changes[["step", "group"]].drop_duplicates().to_numpy())) == {
        (1, "edited"), (1, "control"), (2, "edited"), (2, "control")}
    # a change is the mean over the group's entries of (checkpoint - unedited), paired by entry
    wide = scores.set_index(["uid", "probe", "metric", "state"])["value"].unstack("state")
    sub = wide.xs(("action", "fluency"), level=("probe", "metric"))
    edited = [r["uid"] for r in recs if r["group"] == "edited" and r["step"] == 2]
    row = changes[(changes.step == 2) & (changes.group == "edited") & (changes.probe == "action")
                  & (changes.metric == "fluency")]
    expected = float((sub.loc[edited, "rome@2"] - sub.loc[edited, "pre"]).mean())
    assert float(row["change"].iloc[0]) == pytest.approx(expected)
    assert int(row["n"].iloc[0]) == 2
    assert summary["sequences"]["rome"]["n_edits"] == 2
    assert (tmp_path / "sge_vs_edits.png").stat().st_size > 0
    assert "| 2 |" in (tmp_path / "summary.md").read_text()

    again = run_sequential_study(_config(countermoral_dir, tmp_path), lm=bundled_lm)  # finished: nothing remade
    assert _lines(tmp_path / "records" / "rome-sequential.jsonl") == recs
    assert again["changes"] == summary["changes"]


def test_batch_methods_are_refused(countermoral_dir, tmp_path):
    study = StudyConfig(methods=("memit:batch",), data=str(countermoral_dir), out=str(tmp_path))
    with pytest.raises(SageInputError, match="drop ':batch'"):
        SequentialStudyConfig(study)
