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


def _lines(paths) -> int:
    return sum(p.read_bytes().count(b"\n") for p in paths if p.exists())


def kill_when(cmd, env, files, n: int, poll: float = 0.05) -> None:
    """Start `cmd`, SIGKILL it as soon as the files (a callable returning paths) hold `n` or more
    complete lines. No deadline: the wait ends when the lines appear or the process exits (a
    test failure: it finished before it could be killed); pytest-timeout guards against hangs."""
    import signal
    import tempfile
    import time

    with tempfile.TemporaryFile() as err:  # a file, not a pipe: progress bars must never block the child
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        while proc.poll() is None and _lines(files()) < n:
            time.sleep(poll)  # polling a file that another process writes; not a synchronisation sleep
        if proc.poll() is not None:
            err.seek(0)
            raise AssertionError(f"the run ended (status {proc.returncode}) before it could be killed: "
                                 f"{err.read().decode(errors='replace')[-2000:]}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
