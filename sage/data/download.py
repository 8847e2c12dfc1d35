"""Download registered datasets (`sage.data.catalog`) into the sage cache, verified and resumable.

Files come from GitHub's raw file host at the pinned commit,
`{SAGE_DATA_ENDPOINT}/{owner}/{repo}/{commit}/{path}` (default endpoint
https://raw.githubusercontent.com; point the variable at a mirror with the same layout). Each file
streams into `<name>.part`; a dropped connection is resumed with an HTTP Range request (a few
times in the same run, and by the next run from the `.part` left behind); a finished file is
checked against its pinned size and sha256 and only then renamed into place, so a file under its
final name is always a verified one. A mismatch discards that one download, keeps every verified
file, and fails with one line. Offline (`--offline`, HF_HUB_OFFLINE=1) nothing touches the network.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from sage.data.catalog import DATASETS, Dataset, RemoteFile
from sage.errors import SageInputError
from sage.outputs import publish, write_text
from sage.progress import progress_bar
from sage.settings import cache_dir, offline
from sage.version import __version__

log = logging.getLogger(__name__)

ENDPOINT_ENV = "SAGE_DATA_ENDPOINT"
DEFAULT_ENDPOINT = "https://raw.githubusercontent.com"
RETRIES = 5  # attempts per file after a dropped connection that brought no new bytes
CONNECT_RETRIES = 1  # a host that cannot be reached at all is reported at once
_CHUNK = 1 << 16
_TIMEOUT = 60.0
_RETRY_STATUS = (408, 429, 500, 502, 503, 504)


def endpoint() -> str:
    return os.environ.get(ENDPOINT_ENV, DEFAULT_ENDPOINT).rstrip("/")


def file_url(ds: Dataset, f: RemoteFile) -> str:
    return f"{endpoint()}/{ds.owner}/{ds.repo}/{ds.commit}/{quote(f.path)}"


def dataset_dir(name: str, to: str | Path | None = None) -> Path:
    """Local directory of dataset `name`: `to`, or `$SAGE_CACHE_DIR/data/<name>`."""
    return Path(to) if to is not None else cache_dir() / "data" / name


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _selected(ds: Dataset, files: Iterable[str] | None) -> list[RemoteFile]:
    return list(ds.files) if files is None else [ds.file(dest) for dest in files]


def _present(root: Path, f: RemoteFile) -> bool:
    """Cheap check (name and size); only verified files are ever renamed to their final name."""
    path = root / f.dest
    return path.is_file() and path.stat().st_size == f.size


def local_dataset(name: str, files: Iterable[str] | None = None, to: str | Path | None = None) -> Path | None:
    """The dataset's directory if the selected files are all there; no network."""
    ds = DATASETS.get(name)
    root = dataset_dir(name, to)
    return root if all(_present(root, f) for f in _selected(ds, files)) else None


def development_copy(name: str, folder: str) -> Path | None:
    """A dataset found without the network, in order: `$SAGE_SHARED_DATA/<folder>` when that
    variable is set and the folder exists (development, tests); the verified copy in the sage
    cache; a development checkout's `../shared/data/<folder>` (only when SAGE_SHARED_DATA is unset)."""
    env = os.environ.get("SAGE_SHARED_DATA")
    if env and (Path(env) / folder).is_dir():
        return Path(env) / folder
    cached = local_dataset(name)
    if cached is not None:
        return cached
    if not env:
        for path in (Path.cwd().parent / "shared" / "data" / folder,
                     Path(__file__).resolve().parents[3] / "shared" / "data" / folder):
            if path.is_dir():
                return path
    return None


def find_dataset(name: str, folder: str | None = None, hint: str = "") -> Path:
    """A dataset's folder: a local copy (`development_copy`), else downloaded into the sage cache
    now; offline or without network, SageInputError with one line saying how to get it."""
    found = development_copy(name, folder or name)
    return found if found is not None else ensure_dataset(name, hint=hint)


class _ChecksumMismatch(Exception):
    pass


class _NotResumed(Exception):
    """The server answered a Range request with neither the asked range nor the whole file."""


def _fail(url: str, what: str, name: str, part: Path) -> SageInputError:
    kept = (f"the {part.stat().st_size} bytes received are kept and `sage data download {name}` resumes "
            "them" if part.exists() and part.stat().st_size else f"run `sage data download {name}` again")
    return SageInputError(
        f"could not download {url} ({what}); {kept}; check the network, or set {ENDPOINT_ENV} to a mirror "
        "with the same layout"
    )


def _stream(url: str, part: Path, f: RemoteFile, bar, name: str) -> None:
    """Bring `part` to `f.size` bytes, resuming with Range after a dropped connection."""

    failures = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        if have > f.size:  # longer than the pinned file: it cannot be a prefix of it
            part.unlink()
            have = 0
        if have == f.size:
            return
        headers = {"User-Agent": f"sage/{__version__}", "Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        got = 0
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=_TIMEOUT) as resp:
                resumed = resp.status == 206 and resp.headers.get("Content-Range", "").startswith(f"bytes {have}-")
                if have and not resumed:  # 200: the whole file follows; anything else: start over
                    log.info("%s: the server did not resume at byte %d; downloading from the start", url, have)
                    bar.update(-have)
                    part.unlink()
                    if resp.status != 200:
                        raise _NotResumed(resp.status)
                    have = 0
                with open(part, "ab") as out:
                    for chunk in iter(lambda: resp.read(_CHUNK), b""):
                        out.write(chunk)
                        got += len(chunk)
                        bar.update(len(chunk))
            if have + got < f.size:  # a server that closed early without an error
                raise http.client.IncompleteRead(b"", f.size - have - got)
        except _NotResumed as exc:
            failures += 1
            if failures > RETRIES:
                raise _fail(url, f"HTTP {exc} to a Range request, {RETRIES} times", name, part) from None
        except urllib.error.HTTPError as exc:
            if exc.code == 416:  # our .part is not a prefix the server accepts: start over
                part.unlink(missing_ok=True)
                bar.update(-have)
                failures += 1
            elif exc.code in _RETRY_STATUS:
                failures += 1
            else:
                raise SageInputError(
                    f"{url} answered HTTP {exc.code}; the pinned file is not there (check {ENDPOINT_ENV} "
                    "if you set it, or report it)") from None
            if failures > RETRIES:
                raise _fail(url, f"HTTP {exc.code} after {RETRIES} retries", name, part) from None
        except urllib.error.URLError as exc:  # no connection (DNS, refused, proxy): retry briefly
            failures += 1
            if failures > CONNECT_RETRIES:
                raise _fail(url, f"{type(exc.reason).__name__}: {exc.reason}", name, part) from None
            log.warning("%s: %s; retrying", url, exc.reason)
        except (http.client.HTTPException, OSError) as exc:  # the connection dropped mid-file
            failures = 0 if got else failures + 1  # only attempts that bring no bytes count
            if failures > RETRIES:
                raise _fail(url, f"{type(exc).__name__}: {exc}", name, part) from None
            log.warning("%s: connection lost after %d of %d bytes (%s); resuming",
                        url, have + got, f.size, type(exc).__name__)
        if failures:
            time.sleep(min(0.25 * 2 ** failures, 8.0))  # back-off between failed attempts


def _fetch(ds: Dataset, f: RemoteFile, root: Path, bar) -> None:
    dest = root / f.dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    url = file_url(ds, f)
    _stream(url, part, f, bar, ds.name)
    digest = sha256_file(part)
    if digest != f.sha256:
        part.unlink()
        raise _ChecksumMismatch(f"{url}: sha256 {digest} differs from the pinned {f.sha256}")
    publish(part, dest)  # fsynced, renamed: the final name only ever holds verified bytes


def _write_manifest(ds: Dataset, root: Path) -> None:
    manifest = {
        "dataset": ds.name, "source": ds.source, "commit": ds.commit, "endpoint": endpoint(),
        "files": {f.dest: {"path": f.path, "size": f.size, "sha256": f.sha256} for f in ds.files},
    }
    write_text(root / "SOURCE.json", json.dumps(manifest, indent=1) + "\n")


def download_dataset(name: str, *, to: str | Path | None = None, files: Iterable[str] | None = None,
                     progress: bool = True, hint: str = "") -> Path:
    """Download (the selected files of) dataset `name`; returns its directory.

    Files already present and matching their sha256 are not fetched again.
    """
    from filelock import FileLock

    ds = DATASETS.get(name)
    root = dataset_dir(name, to)
    wanted = _selected(ds, files)
    if offline() and not all(_present(root, f) for f in wanted):
        missing = sum(not _present(root, f) for f in wanted)
        raise SageInputError(
            f"dataset {name!r} is not downloaded ({missing} of {len(wanted)} files missing under {root}) and "
            f"offline mode is on (--offline / HF_HUB_OFFLINE=1): run `sage data download {name}` with network "
            f"access{hint}"
        )
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".download.lock")):  # one downloader per directory
        todo = []
        for f in wanted:
            path = root / f.dest
            if _present(root, f) and sha256_file(path) == f.sha256:
                continue
            if path.exists():
                log.warning("%s does not match its pinned sha256; downloading it again", path)
            todo.append(f)
        if not todo:
            return root
        log.info("downloading %d file(s) of %s (%s) into %s", len(todo), name, ds.source, root)
        errors: list[str] = []
        with progress_bar(total=sum(f.size for f in todo), unit="B", unit_scale=True, desc=name,
                          enabled=None if progress else False) as bar:
            for f in todo:
                part = root / (f.dest + ".part")
                if part.exists():
                    bar.update(min(part.stat().st_size, f.size))  # resumed bytes
                try:
                    _fetch(ds, f, root, bar)
                except _ChecksumMismatch as exc:
                    errors.append(str(exc))
        _write_manifest(ds, root)
    if errors:
        kept = sum(_present(root, f) for f in ds.files)
        raise SageInputError(
            f"{errors[0]}; the download was discarded ({len(errors)} file(s) failed verification; the {kept} "
            f"verified files under {root} are kept): run `sage data download {name}` again, and report it if "
            "it persists"
        )
    return root


def ensure_dataset(name: str, *, files: Iterable[str] | None = None, hint: str = "") -> Path:
    """The dataset's cache directory, downloading what is missing when online; one line otherwise."""
    files = list(files) if files is not None else None
    return local_dataset(name, files) or download_dataset(name, files=files, hint=hint)
