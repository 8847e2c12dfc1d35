"""Writing outputs: every whole file through one atomic helper, and a failed write as one line.

`write_whole(path, write)` has `write(tmp)` write the file under a temporary name of this process
(`<name>.tmp<pid>`, beside it), flushes it to disk (fsync), and renames it over `path`: a crash, a
full disk or a concurrent reader never sees half a file, and the previous file stays until the
new one is complete. A write that fails removes its temporary file.

An `OSError` on an output (a read-only folder, a path under a file, a full disk, a name longer than
the file system allows) becomes an `OutputError`: one line naming the path, the reason and the fix,
which the CLI prints with exit status 2 like any other bad input.
"""
from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from sage.errors import SageInputError

_NOT_WRITABLE = "the location is not writable; choose another output folder (--out)"
_HINTS = {
    errno.EACCES: _NOT_WRITABLE,
    errno.EPERM: _NOT_WRITABLE,
    errno.EROFS: "it is on a read-only file system; choose another output folder (--out)",
    errno.ENOENT: "a folder of the path cannot be created there; choose another output folder (--out)",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another output folder (--out)",
    errno.EISDIR: "a folder is in the way of the file; move it or choose another output folder (--out)",
    errno.EEXIST: "a file is in the way of the folder; move it or choose another output folder (--out)",
    errno.ENOSPC: "the disk is full; free some space or choose an output folder (--out) on another disk",
    errno.EDQUOT: "the disk quota is used up; free some space or choose an output folder (--out) on another disk",
    errno.EFBIG: "the file is larger than this system allows (ulimit -f); raise the limit or write less",
    errno.ENAMETOOLONG: "a name in the path is too long (at most 255 bytes each); choose a shorter output "
                        "folder (--out) or run name",
}


class OutputError(SageInputError):
    """An output that cannot be written; the message names the path, the reason and the fix."""


def output_error(path: str | Path, exc: OSError) -> OutputError:
    """The one-line error of a failed write of `path`."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = _HINTS.get(exc.errno, "check the path, or choose another output folder (--out)")
    return OutputError(f"{path}: cannot write it ({reason}); {hint}")


@contextmanager
def writing(path: str | Path):
    """An `OSError` raised inside the block becomes the `OutputError` naming `path`."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise output_error(path, exc) from None


def temp_path(path: str | Path) -> Path:
    """The temporary name this process writes `path` under before it is published."""
    path = Path(path)
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


def fsync_dir(folder: str | Path) -> None:
    """Flush a folder's entries (a rename in it) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(tmp: str | Path, path: str | Path) -> Path:
    """Flush the finished file `tmp` to disk and rename it over `path`."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)
    return Path(path)


def write_whole(path: str | Path, write: Callable[[Path], object]) -> Path:
    """`write(tmp)` writes the file under `temp_path(path)`; it is fsynced and renamed to `path`.
    On any failure the temporary file is removed and `path` is left as it was; an `OSError`
    becomes an `OutputError` naming `path`."""
    path = Path(path)
    tmp = temp_path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            write(tmp)
            return publish(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def write_bytes(path: str | Path, data: bytes) -> Path:
    """`data` as the whole file `path`, atomically (`write_whole`)."""
    return write_whole(path, lambda tmp: tmp.write_bytes(data))


def write_text(path: str | Path, text: str) -> Path:
    """`text` (UTF-8) as the whole file `path`, atomically (`write_whole`)."""
    return write_bytes(path, text.encode("utf-8"))
