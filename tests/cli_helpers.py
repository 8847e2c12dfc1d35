"""Running `python -m sage` in a real subprocess and checking its one-line user errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_sage(*args, cwd=None, timeout=900, env=None):
    """`python -m sage ARGS` from the repository root (this checkout first on sys.path)."""
    if env is not None:
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "sage", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=timeout, env=env, check=False)


def assert_clean_error(proc, *needles):
    """Exit status 2, no traceback, exactly one `error:` line containing every needle."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0]
