"""The output folder (`--out`) of a run, claimed for the run's duration.

`claim_run_dir(out, inputs=..., outputs=...)`, entered before a command reads or writes anything:

- refuses an `out` where one of the run's outputs would overwrite one of its inputs (`sage score
  --responses D/responses.csv --out D`), comparing resolved paths (symlinks, `..`, hard links);
- creates the folder; a path that cannot be one (read-only, under a file, a name too long) is one
  line naming it (`sage.outputs.OutputError`);
- takes an exclusive lock on `<out>/.sage.lock` (flock, through filelock): a second run into the
  same folder at once is refused with one line naming the folder and the lock. The kernel drops
  the lock when the process ends however it ends, so the lock file left behind never blocks a
  later run; it is a dotfile and no command reads it as an output;
- when the run fails having written nothing, removes the folders it created, so bad input leaves
  no empty output folder behind.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Mapping

from sage.errors import SageInputError
from sage.outputs import writing

LOCK_NAME = ".sage.lock"


class RunDirBusy(SageInputError):
    """Another process holds the output folder's lock."""


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, RuntimeError):  # a path too long to resolve, a symlink loop: not the same file
        return False


def check_inputs_kept(out: str | Path, inputs: Mapping[str, str | Path | None], outputs: Iterable[str]) -> None:
    """One line when writing `outputs` (names inside `out`) would overwrite one of `inputs`
    (option name -> path; None and paths that are not files are skipped)."""
    out = Path(out)
    for option, given in inputs.items():
        if given is None or not Path(given).is_file():
            continue
        for name in [*outputs, LOCK_NAME]:
            if _same_file(Path(given), out / name):
                raise SageInputError(
                    f"{given}: the output {out / name} would overwrite this input ({option}); "
                    "choose another --out, or move the input out of that folder")


def _missing_dirs(out: Path) -> list[Path]:
    """The folders `out.mkdir(parents=True)` would create, deepest first."""
    missing = []
    path = out.absolute()
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _only_the_lock(folder: Path) -> bool:
    try:
        return {p.name for p in folder.iterdir()} <= {LOCK_NAME}
    except OSError:
        return False


@contextmanager
def claim_run_dir(out: str | Path, *, inputs: Mapping[str, str | Path | None] | None = None,
                  outputs: Iterable[str] = ()):
    """Hold `out` for the block (see the module docstring); yields it as a Path."""
    from filelock import FileLock, Timeout

    out = Path(out)
    check_inputs_kept(out, inputs or {}, list(outputs))
    lock_path = out / LOCK_NAME
    with writing(out):  # a name too long fails the first stat already
        created = _missing_dirs(out)
        out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path), timeout=0)
    try:
        with writing(lock_path):
            try:
                lock.acquire()
            except Timeout:  # filelock's Timeout is an OSError: told apart before `writing` sees it
                raise RunDirBusy(f"{out}: another sage run is writing to this folder (it holds the lock "
                                 f"{lock_path}); wait for it to finish, or choose another --out") from None
    except BaseException:
        _remove_created(created)
        raise
    finished = False
    try:
        yield out
        finished = True
    finally:
        lock.release()
        if not finished:
            _remove_created(created)


def _remove_created(created: list[Path]) -> None:
    """Remove the folders this run created while they hold nothing but the lock file."""
    for folder in created:  # deepest first
        if not _only_the_lock(folder):
            return
        try:
            (folder / LOCK_NAME).unlink(missing_ok=True)
            folder.rmdir()
        except OSError:
            return
