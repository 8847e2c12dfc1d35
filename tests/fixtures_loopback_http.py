"""Real HTTP servers on loopback for download tests: a GitHub raw-file mirror and a Hugging Face hub.

Both record every request (method, path, headers), honour `Range: bytes=N-` with 206 and
Content-Range, and can drop the connection mid-file (headers with the full Content-Length, part
of the body, then a closed socket) a given number of times per path. The hub speaks the URL layout
and headers huggingface_hub reads (checked against huggingface_hub 2.4's file_download.py and
hf_api.py): `GET /api/models/{repo}[/revision/{rev}]` (id, sha, siblings),
`GET /api/models/{repo}/tree/{rev}` (recursive file list), `HEAD|GET /{repo}/resolve/{rev}/{file}`
with ETag, X-Repo-Commit, Content-Length and Accept-Ranges, and the hub's error codes
(X-Error-Code: RepoNotFound / GatedRepo with 401/403).
"""
from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict = field(default_factory=dict)
    ranged: bool = False  # a file body: Range requests are honoured


@dataclass
class Seen:
    method: str
    path: str
    headers: dict

    @property
    def range(self) -> str | None:
        return self.headers.get("range")


class LoopbackServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 (a free port), started on construction."""

    def __init__(self):
        self.requests: list[Seen] = []
        self.drops: dict[str, int] = {}  # path -> how many more GETs to cut mid-body
        self.ignore_range: set[str] = set()  # paths answered with the whole file even to a Range request
        self.fail_get: dict[str, int] = {}  # path -> HTTP status every GET of it gets (HEAD still succeeds)
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_HEAD(self):
                outer._serve(self, "HEAD")

            def do_GET(self):
                outer._serve(self, "GET")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    # subclasses answer here
    def route(self, method: str, path: str, query: str, headers: dict) -> Reply:
        raise NotImplementedError

    def drop(self, path: str, times: int = 1) -> None:
        with self._lock:
            self.drops[path] = times

    def seen(self, predicate=None) -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if predicate is None or predicate(r)]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        path = unquote(parts.path)
        headers = {k.lower(): v for k, v in h.headers.items()}
        with self._lock:
            self.requests.append(Seen(method, path, headers))
        reply = self.route(method, path, parts.query, headers)
        if method == "GET" and path in self.fail_get:
            reply = Reply(self.fail_get[path], b"server error")
        body, status, extra = reply.body, reply.status, dict(reply.headers)
        if reply.ranged and status == 200 and path not in self.ignore_range:
            extra["Accept-Ranges"] = "bytes"
            rng = headers.get("range", "")
            if rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[len("bytes="):-1])
                if start >= len(body):
                    status, extra["Content-Range"], body = 416, f"bytes */{len(body)}", b""
                else:
                    status, extra["Content-Range"] = 206, f"bytes {start}-{len(body) - 1}/{len(body)}"
                    body = body[start:]
        cut = None
        if method == "GET" and reply.ranged and status in (200, 206):
            with self._lock:
                if self.drops.get(path, 0) > 0:
                    self.drops[path] -= 1
                    cut = max(1, len(body) // 2)
        h.send_response(status)
        for k, v in extra.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        if cut is not None:
            h.send_header("Connection", "close")
        h.end_headers()
        if method == "HEAD":
            return
        if cut is None:
            h.wfile.write(body)
            return
        h.wfile.write(body[:cut])  # then the connection dies mid-file
        h.wfile.flush()
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class GitHubRawMirror(LoopbackServer):
    """`/{owner}/{repo}/{commit}/{path}` -> bytes of a local file (read per request)."""

    def __init__(self, files: dict[str, Path]):
        self.files = dict(files)  # url path -> local file
        self.altered: dict[str, bytes] = {}  # url path -> bytes served instead
        super().__init__()

    def route(self, method, path, query, headers) -> Reply:
        if path in self.altered:
            return Reply(body=self.altered[path], ranged=True)
        if path in self.files:
            return Reply(body=self.files[path].read_bytes(), ranged=True)
        return Reply(404, b"404: Not Found")


@dataclass
class HubRepo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None  # gated: only this bearer token gets in


class FakeHub(LoopbackServer):
    def __init__(self, repos: dict[str, HubRepo]):
        self.repos = dict(repos)
        super().__init__()

    def _denied(self, repo_id: str, repo: HubRepo | None, headers: dict) -> Reply | None:
        if repo is None:
            return Reply(401, b'{"error":"Repository not found"}',
                         {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found",
                          "Content-Type": "application/json"})
        if repo.token is None:
            return None
        auth = headers.get("authorization", "")
        if auth == f"Bearer {repo.token}":
            return None
        message = (f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                   "to access it. Please log in.")
        return Reply(403 if auth else 401, json.dumps({"error": message}).encode(),
                     {"X-Error-Code": "GatedRepo", "X-Error-Message": message, "Content-Type": "application/json"})

    @staticmethod
    def _split_repo(rest: str) -> tuple[str, str]:
        org, name, *tail = rest.split("/", 2)
        return f"{org}/{name}", (tail[0] if tail else "")

    def route(self, method, path, query, headers) -> Reply:
        if path.startswith("/api/models/"):
            repo_id, tail = self._split_repo(path[len("/api/models/"):])
            repo = self.repos.get(repo_id)
            denied = self._denied(repo_id, repo, headers)
            if denied:
                return denied
            if tail == "" or tail.startswith("revision/"):
                info = {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                        "gated": "manual" if repo.token else False,
                        "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
                return Reply(body=json.dumps(info).encode(), headers={"Content-Type": "application/json"})
            if tail.startswith("tree/"):
                tree = [{"type": "file", "path": p, "size": len(b),
                         "oid": hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()}
                        for p, b in sorted(repo.files.items())]
                return Reply(body=json.dumps(tree).encode(), headers={"Content-Type": "application/json"})
            return Reply(404, b"{}", {"Content-Type": "application/json"})
        if "/resolve/" in path:
            repo_id, tail = self._split_repo(path.lstrip("/"))
            repo = self.repos.get(repo_id)
            denied = self._denied(repo_id, repo, headers)
            if denied:
                return denied
            _, _rev, file = tail.split("/", 2)
            if file not in repo.files:
                return Reply(404, b"Entry not found", {"X-Error-Code": "EntryNotFound",
                                                       "X-Repo-Commit": repo.commit})
            body = repo.files[file]
            return Reply(body=body, ranged=True, headers={
                "ETag": f'"{hashlib.sha256(body).hexdigest()}"', "X-Repo-Commit": repo.commit,
                "Content-Type": "application/octet-stream"})
        return Reply(404, b"not found")


def read_dir(root: Path) -> dict[str, bytes]:
    """Every file under `root` as {relative posix path: bytes}."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def wait_until_serving(url: str, proc, what: str, log_name: str) -> None:
    """Poll a starting server's `url` until it answers (no deadline: pytest-timeout guards against a
    hang); if the process exits first, fail naming its log."""
    import pytest

    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            if proc.poll() is not None:
                pytest.fail(f"{what} exited with {proc.returncode} (see {log_name})")
            time.sleep(0.5)  # polling a starting server
