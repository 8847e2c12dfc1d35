"""A real Label Studio on loopback: project from the exported config, tasks imported, annotations
recorded through the HTTP API, exported as JSON and read back with `sage annotate import`.

Label Studio lives in its own virtualenv (scripts/install_label_studio.sh); the test finds it through
SAGE_LABEL_STUDIO or ~/.cache/sage-label-studio-venv/bin/label-studio and skips when absent.
Label Studio >= 1.23 refuses legacy API tokens unless enabled; this throw-away instance enables them.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from test_annotation_data import responses_frame

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EXE = Path.home() / ".cache" / "sage-label-studio-venv" / "bin" / "label-studio"
TOKEN = "sage-test-token-0123456789"
LABELS = ("entailment", "neutral", "contradiction")

pytestmark = [pytest.mark.slow, pytest.mark.server]


def _executable() -> Path:
    exe = Path(os.environ.get("SAGE_LABEL_STUDIO") or DEFAULT_EXE)
    if not exe.is_file():
        pytest.skip(f"Label Studio not installed at {exe}: run scripts/install_label_studio.sh "
                    f"or set SAGE_LABEL_STUDIO to the label-studio executable")
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class API:
    def __init__(self, base: str):
        self.base = base

    def call(self, method: str, path: str, body=None, raw: bool = False):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Authorization": f"Token {TOKEN}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:1000]!r}") from None
        return payload if raw else (json.loads(payload) if payload else None)


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    exe = _executable()
    data_dir = tmp_path_factory.mktemp("label-studio")
    port = _free_port()
    env = {**os.environ, "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true", "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
           "COLLECT_ANALYTICS": "false", "LATEST_VERSION_CHECK": "false"}
    log = open(data_dir / "server.log", "w")
    proc = subprocess.Popen(
        [str(exe), "start", "--no-browser", "--data-dir", str(data_dir), "--port", str(port),
         "--internal-host", "127.0.0.1", "--username", "admin@example.com", "--password", "sage-test-pass",
         "--user-token", TOKEN, "--enable-legacy-api-token"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=data_dir)
    api = API(f"http://127.0.0.1:{port}")
    try:
        while True:  # until it answers or exits; pytest-timeout guards against a hang
            if proc.poll() is not None:
                pytest.fail(f"Label Studio exited with {proc.returncode}; see {data_dir / 'server.log'}")
            try:
                api.call("GET", "/api/current-user/whoami")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(2)  # polling a starting server
        yield api
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def _sage(*args):
    proc = subprocess.run([sys.executable, "-m", "sage", *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_label_studio_round_trip(label_studio, tmp_path):
    api = label_studio
    responses_frame().to_csv(tmp_path / "responses.csv", index=False)
    exp = tmp_path / "exp"
    _sage("annotate", "export", tmp_path / "responses.csv", "--out", exp, "--format", "labelstudio", "--format", "csv")
    pairs = pd.read_csv(exp / "pairs.csv", dtype=str, keep_default_na=False)
    # Pre-annotations from a predictions file are carried into Label Studio's tasks.
    pd.DataFrame({"pair_id": pairs.pair_id[:3], "label": "neutral", "score": 0.5}).to_csv(tmp_path / "pred.csv", index=False)
    _sage("annotate", "export", tmp_path / "responses.csv", "--out", exp, "--format", "labelstudio",
          "--predictions", tmp_path / "pred.csv")

    config = (exp / "labelstudio_config_nli.xml").read_text()
    project = api.call("POST", "/api/projects/", {"title": "sage round trip", "label_config": config})
    tasks_in = json.loads((exp / "labelstudio_tasks.json").read_text())
    imported = api.call("POST", f"/api/projects/{project['id']}/import", tasks_in)
    assert imported["task_count"] == len(pairs) and imported["prediction_count"] == 3
    # The binary same-stance config is accepted by the server too.
    binary = api.call("POST", "/api/projects/", {"title": "sage binary config",
                                                 "label_config": (exp / "labelstudio_config_binary.xml").read_text()})
    assert binary["id"] != project["id"]
    listing = api.call("GET", f"/api/tasks/?project={project['id']}&page_size=1000")
    tasks = listing["tasks"] if isinstance(listing, dict) else listing
    assert len(tasks) == len(pairs)

    me = api.call("GET", "/api/current-user/whoami")["id"]
    others = [api.call("POST", "/api/users/", {"email": f"ann{i}@example.com", "username": f"ann{i}",
                                               "first_name": f"Ann{i}"})["id"] for i in (2, 3)]
    users = [me] + others
    expected, cancelled, skipped = {}, 0, 0
    for t, task in enumerate(sorted(tasks, key=lambda x: x["id"])):
        pid = task["data"]["pair_id"]
        for u, uid in enumerate(users):
            if u == 2 and t == 0:  # the third annotator never opens the first task
                skipped += 1
                continue
            if u == 2 and t == 1:  # ... and skips ("cancels") the second one
                api.call("POST", f"/api/tasks/{task['id']}/annotations/",
                         {"result": [], "was_cancelled": True, "completed_by": uid})
                cancelled += 1
                continue
            label = LABELS[(t + (u == 1 and t % 4 == 0)) % 3]  # annotator 2 disagrees on every fourth task
            api.call("POST", f"/api/tasks/{task['id']}/annotations/", {"completed_by": uid, "result": [
                {"from_name": "label", "to_name": "text_b", "type": "choices", "value": {"choices": [label]}}]})
            expected[(pid, f"user{uid}")] = label

    export = api.call("GET", f"/api/projects/{project['id']}/export?exportType=JSON", raw=True)
    (tmp_path / "export.json").write_bytes(export)
    proc = _sage("annotate", "import", tmp_path / "export.json", "--pairs", exp / "pairs.csv", "--out", tmp_path / "labels.csv")
    report = json.loads((tmp_path / "labels.report.json").read_text())
    labels = pd.read_csv(tmp_path / "labels.csv")
    got = {(p, a): lab for p, a, lab in zip(labels.pair_id, labels.annotator, labels.label)}
    assert got == expected, proc.stdout
    assert report["counts"]["cancelled"] == cancelled
    assert report["counts"]["pairs_labelled"] == len(pairs)
    assert report["counts"]["labels_by_annotator"] == {f"user{u}": sum(1 for k in expected if k[1] == f"user{u}")
                                                       for u in users}
    _sage("annotate", "agreement", tmp_path / "labels.csv", "--n-boot", "50", "--out", tmp_path / "agr.json")
    agr = json.loads((tmp_path / "agr.json").read_text())
    assert agr["n_annotators"] == 3 and agr["fleiss_items_left_out"] == 2
