"""Issue 31: `sage edit` and `sage study edit-consistency` share their options and say one idea with
one word: `--method NAME:batch` and `--hparams {"METHOD": {overrides}}`; the old spellings still work
for one release, with a warning."""
from __future__ import annotations

import json

import pytest

from sage.cli.editing_options import MethodChoice, parse_methods, read_hparams
from sage.errors import SageInputError
from tests.fixtures_cli import assert_clean_error, run_sage


def test_methods_and_their_batch_mode():
    assert parse_methods(["rome", "memit:batch"]) == [MethodChoice("rome", False), MethodChoice("memit", True)]
    assert [c.spelled for c in parse_methods(["lora", "memit"], all_batch=True)] == ["lora:batch", "memit:batch"]
    with pytest.raises(SageInputError, match="method 'rome' does not batch"):  # refused before anything loads
        parse_methods(["rome:batch"])
    with pytest.raises(SageInputError, match="rome:fast"):
        parse_methods(["rome:fast"])
    with pytest.raises(SageInputError, match="unknown editing method 'nope'"):
        parse_methods(["nope"])


def test_hparams_per_method_and_the_old_plain_shape(tmp_path, capsys):
    per_method = tmp_path / "h.json"
    per_method.write_text(json.dumps({"rome": {"v_steps": 12}, "memit": {"layers": [3, 4]}}))
    assert read_hparams(per_method, ["rome", "memit"]) == {"rome": {"v_steps": 12}, "memit": {"layers": [3, 4]}}
    assert read_hparams(None, ["rome"]) == {}
    assert capsys.readouterr().err == ""

    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"v_steps": 12}))
    assert read_hparams(plain, ["rome"]) == {"rome": {"v_steps": 12}}
    assert "deprecated" in capsys.readouterr().err
    with pytest.raises(SageInputError, match="needs exactly one --method"):
        read_hparams(plain, ["rome", "memit"])
    with pytest.raises(SageInputError, match="overrides for 'lora', which is not among the methods"):
        read_hparams(_write(tmp_path, {"lora": {"r": 2}}), ["rome"])
    with pytest.raises(SageInputError, match="field 'memit' must be an object"):
        read_hparams(_write(tmp_path, {"rome": {"v_steps": 1}, "memit": 3}), ["rome", "memit"])
    with pytest.raises(SageInputError, match="malformed JSON"):
        read_hparams(_write(tmp_path, "{not json"), ["rome"])
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"rome": {"note": "caf\xe9"}}'.encode("latin-1"))
    with pytest.raises(SageInputError, match="not UTF-8"):
        read_hparams(latin1, ["rome"])


def _write(tmp_path, data) -> str:
    path = tmp_path / "data.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_both_commands_take_the_same_editing_options():
    from sage.cli.edit import command as edit
    from sage.cli.study import edit_consistency

    def names(cmd):
        return {p.name for p in cmd.params}

    shared = {"methods", "frameworks", "subset", "limit", "model", "out_dir", "data_dir", "hparams_file",
              "corpus", "device", "seed", "dtype", "device_map", "no_progress", "executor"}
    assert shared <= names(edit) and shared <= names(edit_consistency)


def test_the_old_batch_flag_still_works_with_a_warning(tmp_path):
    """`sage edit --batch` means every method in batch mode; here the missing data stops the run
    after the warning, before any model loads."""
    proc = run_sage("edit", "--method", "memit", "--batch", "--framework", "deontology", "--data",
                    tmp_path / "missing", "--out", tmp_path / "o")
    assert "warning: --batch is deprecated" in proc.stderr and "--method NAME:batch" in proc.stderr
    assert_clean_error(proc, "missing")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra, message", [
    (["--sequential", "--method", "memit:batch"], "drop ':batch'"),
    (["--sequential", "--method", "rome", "--executor", "ray"], "drop --executor"),
    (["--method", "rome", "--checkpoints", "10"], "belong to --sequential"),
    (["--method", "rome", "--order-seed", "3"], "belong to --sequential"),
    (["--method", "rome", "--drift-texts", "8"], "belong to --sequential"),
    (["--sequential", "--method", "rome", "--drift-texts", "0"], "--drift-texts must be >= 1"),
    (["--sequential", "--method", "rome", "--checkpoints", "10,x"], "comma-separated numbers"),
])
def test_sequential_options_that_do_not_fit_stop_in_one_line(extra, message, tmp_path):
    proc = run_sage("edit", "--out", tmp_path / "o", *extra)
    assert_clean_error(proc, message)
    assert not (tmp_path / "o").exists()
