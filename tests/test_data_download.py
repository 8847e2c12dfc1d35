"""Datasets by name: pinned checksums, `sage data download` against a loopback GitHub raw-file
mirror serving ../shared/data in the upstream URL layout (real download code, real checksums),
interrupted and resumed transfers, a served file altered, offline mode, question sets by name, and
`sage data download countermoral` + `sage edit` end to end without ../shared."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from fixtures_cli import assert_clean_error, run_sage
from fixtures_loopback_http import GitHubRawMirror

pytestmark = pytest.mark.server


def _url_path(ds, f) -> str:
    return f"/{ds.owner}/{ds.repo}/{ds.commit}/{f.path}"


def _shared_copies(shared: Path):
    """(dataset, file, local copy) for every registry file the reference-data folder holds;
    its layout is the registry's (`<dataset>/<dest>`)."""
    from sage.data.catalog import DATASETS

    for name in DATASETS.names():
        ds = DATASETS.get(name)
        for f in ds.files:
            if (shared / name / f.dest).is_file():
                yield ds, f, shared / name / f.dest


@pytest.fixture
def mirror(shared_data):
    server = GitHubRawMirror({_url_path(ds, f): p for ds, f, p in _shared_copies(shared_data)})
    yield server
    server.close()


def data_env(mirror, tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SAGE_OFFLINE",)}
    env.update(SAGE_DATA_ENDPOINT=mirror.url, SAGE_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="0",
               TRANSFORMERS_OFFLINE="0", SAGE_SHARED_DATA=str(tmp_path / "no-shared-data"))
    env.update(extra)
    return env


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pinned_checksums_equal_the_reference_copies(shared_data):
    copies = list(_shared_copies(shared_data))
    by_dataset = {}
    for ds, f, path in copies:
        assert path.stat().st_size == f.size, path
        assert _sha(path) == f.sha256, path
        by_dataset[ds.name] = by_dataset.get(ds.name, 0) + 1
    # every CounterMoral file (entries and published summaries) and the quality100/Vicuna files the folder has
    assert by_dataset == {"countermoral": 16, "sage-quality100": 3, "sage-responses": 3}


def test_registry_is_pinned_and_question_sets_name_registered_files():
    from sage.data.catalog import DATASETS, QUESTION_SETS

    for name in DATASETS.names():
        ds = DATASETS.get(name)
        assert len(ds.commit) == 40 and all(len(f.sha256) == 64 and f.size > 0 for f in ds.files)
        assert len({f.dest for f in ds.files}) == len(ds.files)
    assert DATASETS.get("countermoral").commit == "3ba60800bab312b007714299390131b4a3960258"
    assert DATASETS.get("sage-quality100").commit == "8d879cbad8fefb3a0f0df440ff114946d0afbbe7"
    for name in QUESTION_SETS.names():
        qs = QUESTION_SETS.get(name)
        assert DATASETS.get(qs.dataset).file(qs.file)


def test_download_verifies_writes_atomically_and_is_idempotent(mirror, tmp_path):
    from sage.data.catalog import DATASETS

    env = data_env(mirror, tmp_path)
    proc = run_sage("data", "download", "countermoral", "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "cache" / "data" / "countermoral"
    assert proc.stdout.strip() == f"countermoral: {root}"
    ds = DATASETS.get("countermoral")
    for f in ds.files:
        assert _sha(root / f.dest) == f.sha256
    assert not list(root.rglob("*.part"))
    manifest = json.loads((root / "SOURCE.json").read_text())
    assert manifest["commit"] == ds.commit and len(manifest["files"]) == 16
    assert len(mirror.seen()) == 16 and all(r.range is None for r in mirror.seen())

    mirror.clear()
    again = run_sage("data", "download", "countermoral", "--no-progress", env=env)
    assert again.returncode == 0, again.stderr
    assert mirror.seen() == []  # verified files are not fetched again

    listing = run_sage("data", "list", env=env)
    assert listing.returncode == 0 and f"downloaded: {root}" in listing.stdout
    assert "sage-moral100-high" in listing.stdout


def test_download_to_a_chosen_directory_feeds_edit_data(mirror, tmp_path):
    from sage.editing.dataset import load_countermoral

    target = tmp_path / "mine" / "cm"
    env = data_env(mirror, tmp_path)
    proc = run_sage("data", "download", "countermoral", "--to", target, "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"countermoral: {target}"
    assert not (tmp_path / "cache" / "data" / "countermoral").exists()
    assert len(load_countermoral(target, "care_ethics", "specific")) == 300  # what `--data DIR` reads
    two = run_sage("data", "download", "countermoral", "sage-moral100", "--to", target, env=env)
    assert_clean_error(two, "--to takes one dataset")
    assert_clean_error(run_sage("data", "download", "nope", env=env), "unknown dataset 'nope'", "countermoral")


def test_interrupted_transfer_resumes_with_range_in_the_same_run(mirror, tmp_path):
    from sage.data.catalog import DATASETS

    ds = DATASETS.get("countermoral")
    f = ds.file("deontology/entries.json")
    mirror.drop(_url_path(ds, f))  # the first transfer dies half way
    proc = run_sage("data", "download", "countermoral", "--no-progress", env=data_env(mirror, tmp_path))
    assert proc.returncode == 0, proc.stderr
    gets = mirror.seen(lambda r: r.path == _url_path(ds, f))
    assert [g.range for g in gets] == [None, f"bytes={f.size // 2}-"]
    assert _sha(tmp_path / "cache" / "data" / "countermoral" / f.dest) == f.sha256
    assert "connection lost" in proc.stderr


def test_partial_file_from_a_killed_run_is_resumed(mirror, shared_data, tmp_path):
    from sage.data.catalog import DATASETS

    ds = DATASETS.get("countermoral")
    f = ds.file("virtue_ethics/entries.json")
    root = tmp_path / "cache" / "data" / "countermoral"
    (root / "virtue_ethics").mkdir(parents=True)
    head = (shared_data / "countermoral" / f.dest).read_bytes()[:300_000]
    (root / (f.dest + ".part")).write_bytes(head)  # what a run killed mid-transfer leaves
    proc = run_sage("data", "download", "countermoral", "--no-progress", env=data_env(mirror, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert [g.range for g in mirror.seen(lambda r: r.path == _url_path(ds, f))] == ["bytes=300000-"]
    assert _sha(root / f.dest) == f.sha256 and not (root / (f.dest + ".part")).exists()


def test_server_ignoring_range_restarts_the_file_from_zero(mirror, shared_data, tmp_path):
    from sage.data.catalog import DATASETS

    ds = DATASETS.get("countermoral")
    f = ds.file("care_ethics/entries-broad.json")
    root = tmp_path / "cache" / "data" / "countermoral"
    (root / "care_ethics").mkdir(parents=True)
    (root / (f.dest + ".part")).write_bytes(b"x" * 5000)  # not even a prefix of the file
    mirror.ignore_range.add(_url_path(ds, f))
    proc = run_sage("data", "download", "countermoral", "--no-progress", env=data_env(mirror, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert [g.range for g in mirror.seen(lambda r: r.path == _url_path(ds, f))] == ["bytes=5000-"]
    assert _sha(root / f.dest) == f.sha256


def test_altered_file_fails_in_one_line_and_keeps_verified_files(mirror, shared_data, tmp_path):
    from sage.data.catalog import DATASETS

    ds = DATASETS.get("countermoral")
    bad = ds.file("deontology/entries-broad.json")
    body = bytearray((shared_data / "countermoral" / bad.dest).read_bytes())
    body[1000] ^= 0x20  # one flipped bit, same size
    mirror.altered[_url_path(ds, bad)] = bytes(body)
    env = data_env(mirror, tmp_path)
    proc = run_sage("data", "download", "countermoral", "--no-progress", env=env)
    assert_clean_error(proc, "deontology/entries-broad.json", "sha256", bad.sha256, "15 verified files")
    root = tmp_path / "cache" / "data" / "countermoral"
    assert not (root / bad.dest).exists() and not list(root.rglob("*.part"))
    for f in ds.files:
        if f is not bad:
            assert _sha(root / f.dest) == f.sha256

    del mirror.altered[_url_path(ds, bad)]
    mirror.clear()
    fixed = run_sage("data", "download", "countermoral", "--no-progress", env=env)
    assert fixed.returncode == 0, fixed.stderr
    assert [r.path for r in mirror.seen()] == [_url_path(ds, bad)]  # only the missing file
    assert _sha(root / bad.dest) == bad.sha256


@pytest.mark.parametrize("how", ["env", "flag"])
def test_offline_download_is_one_line_and_never_connects(mirror, tmp_path, how):
    env = data_env(mirror, tmp_path, **({"HF_HUB_OFFLINE": "1"} if how == "env" else {}))
    flag = ["--offline"] if how == "flag" else []
    proc = run_sage(*flag, "data", "download", "countermoral", env=env)
    assert_clean_error(proc, "'countermoral' is not downloaded", "offline mode is on", "sage data download countermoral")
    proc = run_sage(*flag, "edit", "--method", "rome", "--limit", "1", "--out", tmp_path / "o", env=env)
    assert_clean_error(proc, "offline mode is on", "sage data download countermoral", "--data DIR")
    assert mirror.seen() == []


def test_unreachable_mirror_and_missing_file_are_one_line(mirror, tmp_path):
    from sage.data.catalog import DATASETS

    ds = DATASETS.get("sage-quality100")  # the reference folder has 3 of its 9 files: the rest are 404 here
    proc = run_sage("data", "download", "sage-quality100", "--no-progress", env=data_env(mirror, tmp_path))
    assert_clean_error(proc, "answered HTTP 404", "SAGE_DATA_ENDPOINT")
    assert sum(f.dest.endswith(".csv") and (tmp_path / "cache" / "data" / ds.name / f.dest).is_file()
               for f in ds.files) >= 1  # files verified before the 404 are kept
    gone = f"http://127.0.0.1:{mirror.port}"
    mirror.close()
    proc = run_sage("data", "download", "countermoral", "--no-progress",
                    env=data_env(mirror, tmp_path, SAGE_DATA_ENDPOINT=gone, SAGE_CACHE_DIR=str(tmp_path / "c2")))
    assert_clean_error(proc, "could not download", "ConnectionRefusedError", "check the network")


def test_question_set_by_name_downloads_only_its_file(mirror, shared_data, tmp_path, monkeypatch):
    from sage.data.questions import questions_path, read_questions

    for k, v in data_env(mirror, tmp_path).items():
        monkeypatch.setenv(k, v)
    path = questions_path("sage-quality100")
    assert path == tmp_path / "cache" / "data" / "sage-quality100" / "q100.csv"
    assert [r.path.rsplit("/", 1)[-1] for r in mirror.seen()] == ["q100.csv"]
    assert path.read_bytes() == (shared_data / "sage-quality100" / "q100.csv").read_bytes()
    q = read_questions(path)  # the authors' `paraphrased`/`score` columns are user paraphrases
    assert len(q) == 500 and q["question_id"].nunique() == 100
    assert {"paraphrase", "paraphrase_score"} <= set(q.columns)
    mirror.clear()
    assert questions_path("sage-quality100") == path and mirror.seen() == []
    with pytest.raises(Exception, match="not a question set"):
        questions_path("no-such-questions")


def test_countermoral_default_location_downloads_when_missing(mirror, tmp_path, monkeypatch):
    from sage.editing.dataset import default_data_dir, load_countermoral

    for k, v in data_env(mirror, tmp_path).items():
        monkeypatch.setenv(k, v)
    root = default_data_dir()
    assert root == tmp_path / "cache" / "data" / "countermoral" and len(mirror.seen()) == 16
    assert len(load_countermoral(None, "deontology", "broad")) == 30
    mirror.clear()
    assert default_data_dir() == root and mirror.seen() == []


@pytest.mark.slow
def test_data_download_then_edit_without_shared_folder(mirror, tmp_path, bundled_lm):
    """The issue's done-when: `sage data download countermoral` then `sage edit --method rome --limit 1`
    with no ../shared (SAGE_SHARED_DATA points nowhere, the cache is empty, cwd has no ../shared)."""
    env = data_env(mirror, tmp_path)
    work = tmp_path / "w" / "project"
    work.mkdir(parents=True)
    proc = run_sage("data", "download", "countermoral", "--no-progress", env=env, cwd=work)
    assert proc.returncode == 0, proc.stderr
    hp = tmp_path / "rome.json"
    hp.write_text(json.dumps({"rome": {"covariance": "identity", "v_steps": 10}}))  # no key statistics: seconds
    out = tmp_path / "edit"
    proc = run_sage("edit", "--method", "rome", "--limit", "1", "--framework", "deontology", "--model",
                    bundled_lm.path, "--hparams", hp, "--out", out, "--device", "cpu", env=env, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "rome" / "broad" / "entries.jsonl").read_text().splitlines()]
    assert [r["uid"] for r in rows] == ["DEONTOLOGY_1_broad"] and 0 <= rows[0]["reliability"] <= 1
    tables = (out / "tables.md").read_text()
    assert "(GPT2-XL)" in tables  # the downloaded published summaries sit beside our numbers
