"""`benchmarks/gpu_check.sh --dry-run`: the GPU check's steps and arguments, checked without a GPU."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def _run(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}, check=False)


def test_dry_run_lists_the_steps_and_every_step_names_something_that_exists():
    proc = _run("--dry-run", "--budget-s", "300", "--out", "x.json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "4 steps, budget 300 s, results to x.json" in lines[0]
    steps = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in lines[1:]}
    assert list(steps) == ["gpu-tests", "sage-edit-rome", "sage-edit-memit", "scoring-benchmark"]
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "-m", "gpu", "tests/test_gpu.py"], capture_output=True, text=True, cwd=REPO)
    # The step runs every gpu-marked test in the file: the sequential MEMIT run among them (issue 32).
    ids = [line for line in collected.stdout.splitlines() if line.startswith("tests/test_gpu.py::")]
    assert f"{len(ids)} tests collected" in collected.stdout and len(ids) >= 9, collected.stdout
    assert "tests/test_gpu.py::test_sequential_experiment_runs_on_cuda" in ids
    assert sum("test_edits_on_cuda_work_and_restore_bit_for_bit" in i for i in ids) == 4
    edit_help = subprocess.run([sys.executable, "-m", "sage", "edit", "--help"], capture_output=True, text=True,
                               cwd=REPO).stdout
    for option in ("--method", "--limit", "--device", "--out"):
        assert option in edit_help and option in steps["sage-edit-rome"]
    bench_help = subprocess.run([sys.executable, "benchmarks/bench_scoring.py", "--help"], capture_output=True,
                                text=True, cwd=REPO).stdout
    for option in ("--device", "--repeats", "--sample-questions", "--backends", "--json"):
        assert option in bench_help and option in steps["scoring-benchmark"]


def test_bad_arguments_are_one_line_and_exit_2():
    for args in (["--bogus"], ["--budget-s", "soon"], ["--out"]):
        proc = _run("--dry-run", *args)
        assert proc.returncode == 2 and proc.stderr.startswith("error:") and len(proc.stderr.splitlines()) == 1
