"""A resumable run refuses to mix results made under different settings."""
from __future__ import annotations

import json

import pytest

from sage.errors import SageInputError
from sage.provenance import check_resume_settings


def test_first_run_records_settings_and_same_settings_resume(tmp_path):
    run = tmp_path / "rome" / "broad"
    settings = {"method": "rome", "seed": 0, "hparams": {"layer": 4, "layers": (3, 4)}}
    check_resume_settings(run, settings)
    stored = json.loads((run / "settings.json").read_text())
    assert stored == {"method": "rome", "seed": 0, "hparams": {"layer": 4, "layers": [3, 4]}}
    check_resume_settings(run, settings)  # the same settings (tuples stored as lists) resume


def test_changed_setting_is_refused_naming_it(tmp_path):
    run = tmp_path / "run"
    check_resume_settings(run, {"method": "rome", "hparams": {"layer": 4, "v_lr": 1.0}})
    with pytest.raises(SageInputError) as err:
        check_resume_settings(run, {"method": "rome", "hparams": {"layer": 8, "v_lr": 1.0}})
    msg = str(err.value)
    assert "hparams.layer 4 -> 8" in msg and "v_lr" not in msg and "new --out" in msg
    # the refused run left the recorded settings as they were
    assert json.loads((run / "settings.json").read_text())["hparams"]["layer"] == 4


def test_older_runs_are_checked_against_their_summary(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"method": "ft", "seed": 0, "overall": {}, "git": "x"}))
    with pytest.raises(SageInputError, match="seed 0 -> 1"):
        check_resume_settings(run, {"method": "ft", "seed": 1}, legacy=run / "summary.json")
    check_resume_settings(run, {"method": "ft", "seed": 0}, legacy=run / "summary.json")
    assert (run / "settings.json").exists()


def test_unreadable_settings_file_is_a_clear_error(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_bytes(b"\xff\xfe not json")
    with pytest.raises(SageInputError, match="settings.json: unreadable"):
        check_resume_settings(run, {"method": "ft"})
