"""A real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies, for the openai backend's
fault tests that need no model: `GET /v1/models`, `POST /v1/chat/completions` and `/v1/completions`.

By default every completion answers "<name>: <the last user message>", so two servers under the
same model name give different answers. `rule(prompt) -> Reply | None` can answer a prompt
otherwise (a 400, null content); `script` holds replies for the next completion requests, one per
request, before the rule. With `hold` set, every completion request waits until `release` is set
(the test decides when, so nothing is timed). `posts` lists each completion request's arrival
(time.monotonic) and prompt; `wait_for_posts(k)` blocks until k have arrived.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Reply:
    status: int = 200
    body: dict | None = None
    headers: dict = field(default_factory=dict)
    content: str | None = "__default__"  # for a 200 completion: the text, or None for null content
    finish_reason: str = "stop"


def error(status: int, message: str, **headers) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "invalid_request_error"}}, headers)


@dataclass
class Post:
    arrived: float
    path: str
    prompt: str


class FakeOpenAI:
    def __init__(self, name: str = "server", model: str = "default"):
        self.name, self.model = name, model
        self.models: list[dict] = [{"id": model, "object": "model", "created": 0, "owned_by": name}]
        self.rule: Callable[[str], Reply | None] = lambda prompt: None
        self.script: list[Reply | None] = []
        self.posts: list[Post] = []
        self.model_lists = 0
        self.hold = False
        self.release = threading.Event()
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    with outer._cond:
                        outer.model_lists += 1
                    self._send(Reply(200, {"object": "list", "data": outer.models}))
                else:
                    self._send(error(404, f"no route {self.path}"))

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                chat = self.path.endswith("/chat/completions")
                if chat:
                    prompt = next((m["content"] for m in reversed(body.get("messages", [])) if m["role"] == "user"), "")
                else:
                    prompt = body.get("prompt", "")
                with outer._cond:
                    outer.posts.append(Post(time.monotonic(), self.path, prompt))
                    scripted = outer.script.pop(0) if outer.script else None
                    outer._cond.notify_all()
                if outer.hold:
                    outer.release.wait()
                reply = scripted or outer.rule(prompt) or Reply()
                if reply.status == 200 and reply.body is None:
                    text = f"{outer.name}: {prompt}" if reply.content == "__default__" else reply.content
                    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                               "finish_reason": reply.finish_reason} if chat else
                              {"index": 0, "text": text, "logprobs": None, "finish_reason": reply.finish_reason})
                    reply = Reply(200, {"id": "x", "object": "chat.completion" if chat else "text_completion",
                                        "created": 0, "model": body.get("model"), "choices": [choice]}, reply.headers)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, reply: Reply):
                data = json.dumps(reply.body or {}).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                for k, v in reply.headers.items():
                    self.send_header(k, str(v))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def wait_for_posts(self, k: int) -> None:
        """Until k completion requests have arrived (no deadline: pytest-timeout guards hangs)."""
        with self._cond:
            self._cond.wait_for(lambda: len(self.posts) >= k)

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
