"""The executor registry, the local executor, and the one-line errors of `--executor`."""
from __future__ import annotations

import os

import pytest
from fixtures_cli import assert_clean_error, run_sage

from sage.errors import SageInputError
from sage.executors import EXECUTORS, ExecutorOptions, make_executor, run_units


class Squarer:
    built = 0

    def __init__(self):
        Squarer.built += 1

    def run(self, unit):
        return unit * unit


def test_local_executor_runs_units_in_order_and_keeps_keyed_workers():
    Squarer.built = 0
    ex = make_executor()
    assert ex.name == "local" and ex.workers() == 1 and make_executor(ex) is ex
    assert list(ex.map(Squarer, [1, 2, 3], key="sq")) == [(0, 1), (1, 4), (2, 9)]
    assert list(ex.map(Squarer, [4], key="sq")) == [(0, 16)] and Squarer.built == 1  # reused
    ex.release("sq")
    assert list(ex.map(Squarer, [5], key="sq")) == [(0, 25)] and Squarer.built == 2
    assert sorted(EXECUTORS.names()) == ["local", "ray"]


def test_run_units_hands_each_result_to_the_caller_and_releases_unless_asked_to_keep():
    """The one loop `sage edit`'s sweep and the edit-consistency study both run."""
    Squarer.built = 0
    ex, got = make_executor(), {}
    run_units(ex, Squarer, [2, 3], key="k", desc="t", size=lambda u: 1, on_result=got.__setitem__, release=False)
    assert got == {0: 4, 1: 9} and Squarer.built == 1
    run_units(ex, Squarer, [4], key="k", desc="t", size=lambda u: 1, on_result=got.__setitem__)
    assert got[0] == 16 and Squarer.built == 1  # kept between the two calls
    run_units(ex, Squarer, [5], key="k", desc="t", size=lambda u: 1, on_result=got.__setitem__)
    assert got[0] == 25 and Squarer.built == 2  # released by the previous call
    run_units(ex, Squarer, [], key="k", desc="t", size=lambda u: 1, on_result=got.__setitem__)  # nothing to do


def test_pending_groups_skip_finished_items_one_unit_each_or_one_batch():
    from sage.editing.sweep import pending_groups

    assert pending_groups(["a", "b", "c"], {"b"}, batch=False) == [("a",), ("c",)]
    assert pending_groups(["a", "b", "c"], {"b"}, batch=True) == [("a", "c")]
    assert pending_groups(["a"], {"a"}, batch=True) == []
    assert pending_groups([(1, "a"), (2, "b")], {"a"}, batch=False, key=lambda x: x[1]) == [((2, "b"),)]


def test_unknown_executor_and_bad_options_are_one_line_errors():
    with pytest.raises(SageInputError, match="unknown executor 'slurm'; choose one of: local, ray"):
        make_executor("slurm")
    with pytest.raises(SageInputError, match="--workers must be >= 1"):
        ExecutorOptions(workers=0)


@pytest.fixture()
def without_ray(tmp_path):
    """An environment where `import ray` fails, as on a machine without the extra."""
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(fake.parent)] + ([old] if old else []))
    yield
    if old is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = old


@pytest.mark.parametrize("args", [
    ["generate", "answers", "--executor", "ray"],
    ["score", "--model", "smollm2-135m", "--executor", "ray"],
    ["edit", "--method", "ft-m", "--framework", "deontology", "--limit", "1", "--executor", "ray"],
    ["study", "edit-consistency", "--method", "ft-m", "--framework", "deontology", "--limit", "1",
     "--executor", "ray"],
])
def test_ray_executor_without_ray_says_how_to_install(args, without_ray, tmp_path, shared_data):
    if args[0] in ("edit", "study"):
        args = args + ["--data", str(shared_data / "countermoral"), "--out", str(tmp_path / "out")]
    else:
        args = args + (["--out", str(tmp_path / "out")] if args[0] == "generate" else
                       ["--out", str(tmp_path / "out")])
    proc = run_sage(*args)
    assert_clean_error(proc, "the ray executor needs Ray", "pip install 'sage-consistency[ray]'")
