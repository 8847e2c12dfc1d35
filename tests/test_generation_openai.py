"""The openai backend against a REAL llama.cpp server on loopback, with faults injected by a small
real HTTP proxy (429, 500, slow responses, dropped connections). Needs `llama-cpp-python[server]`.
"""
from __future__ import annotations

import http.client
import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.backend_registry import BackendError, BackendOptions
from tests.fixtures_loopback_http import wait_until_serving

pytestmark = [pytest.mark.slow, pytest.mark.server]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    for mod in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip("needs llama-cpp-python[server]: pip install 'sage-consistency[server]'")
    from sage.models.resolve import bundled_generator_gguf

    try:
        gguf = bundled_generator_gguf()
    except Exception as exc:
        pytest.skip(str(exc))
    port = _free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "1024", "--model_alias", "smollm2-135m", "--logits_all", "true"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(f"{url}/v1/models", proc, "llama.cpp server", log.name)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


class FaultProxy:
    """Forwards HTTP requests to `upstream`, first playing the queued faults one per request.

    Faults: "429"/"500" (an error response), "drop" (the connection is closed unanswered),
    "nonjson"/"html"/"nochoices" (HTTP 200 whose body is not a completion) and "hang" (no answer
    until the proxy closes: the client must time out). With `replay` on, an
    upstream answer is kept per request body and served again without asking upstream, so a test
    can give its client a short timeout without normal answers depending on the machine's speed.
    `arrivals` holds each request's arrival time on the proxy's clock (time.monotonic). GET /v1/models
    (the backend's cache identity) is forwarded without a fault and counted apart, in `model_lists`.
    """

    def __init__(self, upstream: str, replay: bool = False):
        self.upstream = upstream.replace("http://", "")
        self.faults: list[str] = []
        self.replay = replay
        self.answers: dict[bytes, tuple] = {}
        self.arrivals: list[float] = []
        self.strip_logprobs = False  # answer like a server that ignores logprobs requests
        self.requests = 0
        self.model_lists = 0  # GET /v1/models (the cache identity's probe), apart from `requests`
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.closed = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):  # the backend's identity probe: no fault, not counted
                    with proxy.lock:
                        proxy.model_lists += 1
                    self._send(*self._forward(b""))
                    return
                self._handle()

            def do_POST(self):
                self._handle()

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy.lock:
                    proxy.arrivals.append(time.monotonic())
                    proxy.requests += 1
                    fault = proxy.faults.pop(0) if proxy.faults else None
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    if fault == "drop":
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.connection.close()
                        self.close_connection = True
                        return
                    if fault in ("429", "500"):
                        payload = b'{"error": {"message": "injected fault", "type": "server_error"}}'
                        self._send(int(fault), [("Content-Type", "application/json")], payload)
                        return
                    if fault == "nonjson":  # a gateway's error page with status 200, labelled JSON
                        self._send(200, [("Content-Type", "application/json")], b"<html>upstream busy</html>")
                        return
                    if fault == "html":  # the same page labelled as HTML
                        self._send(200, [("Content-Type", "text/html")], b"<html>upstream busy</html>")
                        return
                    if fault == "nochoices":  # JSON, but not a completion
                        self._send(200, [("Content-Type", "application/json")], b'{"status": "ok"}')
                        return
                    if fault == "hang":
                        proxy.closed.wait()  # released when the proxy closes, long after the client gave up
                        self.close_connection = True
                        return
                    key = self.path.encode() + b"\0" + body
                    answer = proxy.answers.get(key) if proxy.replay else None
                    if answer is None:
                        answer = self._forward(body)
                        if proxy.replay and answer[0] == 200:
                            proxy.answers[key] = answer
                    self._send(*answer)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with proxy.lock:
                        proxy.in_flight -= 1

            def _forward(self, body):
                conn = http.client.HTTPConnection(proxy.upstream, timeout=600)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if proxy.strip_logprobs and resp.status == 200:
                    doc = json.loads(data)
                    for choice in doc.get("choices", []):
                        choice["logprobs"] = None
                    data = json.dumps(doc).encode()
                kept = [(k, v) for k, v in resp.getheaders()
                        if k.lower() not in ("transfer-encoding", "connection", "content-length")]
                return resp.status, kept, data

            def _send(self, status, headers, data):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(llama_server):
    p = FaultProxy(llama_server)
    yield p
    p.close()


def _backend(urls, **kw):
    from sage.generation.openai_backend import OpenAIBackend

    opts = dict(base_urls=tuple(urls), max_retries=4, backoff=0.05, timeout=120.0, concurrency=4)
    opts.update(kw)
    return OpenAIBackend("smollm2-135m", BackendOptions(**opts))


def _chat(text, n=8, **kw):
    return GenerationRequest(messages=(("user", text),), params=SamplingParams(max_new_tokens=n, **kw))


def test_chat_and_completion_against_real_server(proxy):
    b = _backend([proxy.url])
    chat, plain = b.generate([
        _chat("Is it wrong to lie to a friend?", logprobs=True),
        GenerationRequest(prompt="Question: Is honesty important?\nAnswer:", params=SamplingParams(max_new_tokens=6)),
    ])
    assert chat.text.strip() and plain.text.strip()
    assert chat.finish_reason in ("length", "stop")
    assert chat.token_logprobs and all(lp <= 0 for lp in chat.token_logprobs)
    again = b.generate([_chat("Is it wrong to lie to a friend?", logprobs=True)])[0]
    assert again.text == chat.text  # greedy is deterministic
    # Issue 54, item 2: the cache identity holds the endpoint and llama.cpp's model card.
    assert b.identity()["endpoints"] == [{"url": proxy.url, "served": {"id": "smollm2-135m", "owned_by": "me"}}]
    assert proxy.model_lists == 1


def test_retries_through_429_500_hang_and_dropped_connections(llama_server):
    proxy = FaultProxy(llama_server, replay=True)
    try:
        req = [_chat("Should you return a lost wallet?", n=4)]
        # The answer is fetched once with a generous timeout; the proxy then replays it at once,
        # so the short timeout below only ever meets the injected hang, however busy the machine.
        expected = _backend([proxy.url]).generate(req)[0].text
        assert expected.strip() and proxy.requests == 1
        proxy.faults = ["429", "500", "drop", "hang"]
        out = _backend([proxy.url], timeout=3.0).generate(req)
        assert out[0].text == expected
        assert proxy.requests == 6 and not proxy.faults
    finally:
        proxy.close()


def test_retry_delays_grow_with_jitter_on_the_proxys_clock(llama_server):
    """Retry k waits min(30, backoff * 2**k) * U[0.5, 1.5): with the jitter seeded, each gap
    between arrivals on the proxy is at least that delay (sleeping never takes less), the
    waits double (up to the jitter), and the jitter moved them off the plain doubling."""
    import random

    proxy = FaultProxy(llama_server, replay=True)
    try:
        req = [_chat("Is it fair to skip a queue?", n=2)]
        _backend([proxy.url]).generate(req)
        proxy.arrivals.clear()
        proxy.faults = ["500", "429", "500", "500"]
        backoff, seed = 0.2, 7
        _backend([proxy.url], backoff=backoff, retry_seed=seed).generate(req)
        assert len(proxy.arrivals) == 5
        rng = random.Random(seed)
        delays = [min(30.0, backoff * 2**k) * (0.5 + rng.random()) for k in range(4)]
        gaps = [b - a for a, b in zip(proxy.arrivals, proxy.arrivals[1:])]
        assert all(g >= d for g, d in zip(gaps, delays)), (gaps, delays)
        assert all(d >= backoff * 2**k * 0.5 for k, d in enumerate(delays))
        assert delays != [backoff * 2**k for k in range(4)]  # jittered
        assert sum(gaps) >= sum(delays) >= backoff * (1 + 2 + 4 + 8) * 0.5
    finally:
        proxy.close()


def test_clear_error_after_last_retry(proxy):
    proxy.faults = ["500"] * 3
    with pytest.raises(BackendError) as err:
        _backend([proxy.url], max_retries=2).generate([_chat("Hi", n=2)])
    msg = str(err.value)
    assert "failed after 3 attempts" in msg and "HTTP 500" in msg and proxy.url in msg and "\n" not in msg


def test_a_200_whose_body_is_not_a_completion_is_retried_then_one_line(proxy, tmp_path):
    """Issue 29, item 5: HTTP 200 with a body that is not JSON (or JSON without choices) is retried
    like a 5xx; after the last retry one line names the endpoint, and finished items are kept."""
    proxy.faults = ["nonjson", "html", "nochoices"]
    out = _backend([proxy.url]).generate([_chat("Is it fair to skip a queue?", n=3)])
    assert out[0].text.strip() and proxy.requests == 4 and not proxy.faults
    for fault in ("nonjson", "html", "nochoices"):
        proxy.faults = [fault] * 3
        with pytest.raises(BackendError) as err:
            _backend([proxy.url], max_retries=2).generate([_chat("Hi", n=2)])
        msg = str(err.value)
        assert "failed after 3 attempts" in msg and "HTTP 200" in msg and proxy.url in msg and "\n" not in msg
    from click.testing import CliRunner

    from sage.cli.main import cli

    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nq1,Is it wrong to lie?\nq2,Should you help a stranger?\n")
    args = ["generate", "answers", "--questions", str(q), "--model", "smollm2-135m", "--backend", "openai",
            "--base-url", proxy.url, "--max-new-tokens", "4", "--max-retries", "0", "--concurrency", "1",
            "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "c.sqlite")]
    proxy.faults = [None, "nonjson"]  # the first answer arrives, the second never does
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and "HTTP 200 with a body that is not JSON" in res.output
    assert "Traceback" not in res.output
    served = proxy.requests
    assert CliRunner().invoke(cli, args).exit_code == 0 and proxy.requests == served + 1  # only the lost one


def test_score_takes_the_server_options_of_generate(proxy, tmp_path):
    """Issue 29, item 6: `sage score --model ... --base-url` has --timeout and --max-retries (one
    definition with `sage generate`), so a hanging server fails after them, in one line."""
    from fixtures_cli import assert_clean_error, run_sage

    proxy.faults = ["hang"] * 4
    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nq1,Is it wrong to lie?\n")
    proc = run_sage("score", "--model", "smollm2-135m", "--base-url", proxy.url, "--questions", q,
                    "--timeout", "1", "--max-retries", "1", "--out", tmp_path / "out", "--no-progress")
    assert_clean_error(proc, proxy.url, "failed after 2 attempts", "APITimeoutError", "--timeout")
    assert proxy.requests == 4  # the first paraphrase round asks twice; each request tried twice


def test_offline_means_no_downloads_and_still_calls_named_endpoints(proxy, tmp_path):
    """Issue 29: --offline downloads nothing; an endpoint the user names with --base-url is what they
    asked for, so it is still called (README and --help say so)."""
    from fixtures_cli import run_sage

    assert "--base-url are still called" in " ".join(run_sage("--help").stdout.split())
    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nq1,Is it wrong to lie?\n")
    proc = run_sage("--offline", "generate", "answers", "--questions", q, "--model", "smollm2-135m", "--backend",
                    "openai", "--base-url", proxy.url, "--max-new-tokens", "4", "--out", tmp_path / "out",
                    "--cache", tmp_path / "c.sqlite", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert proxy.requests == 1


def test_several_servers_share_requests_and_bounded_concurrency(llama_server):
    a, b = FaultProxy(llama_server), FaultProxy(llama_server)
    try:
        reqs = [_chat(f"Is it fair to skip line number {i}?", n=2) for i in range(6)]
        outs = _backend([a.url, b.url], concurrency=2).generate(reqs)
        assert all(o.text.strip() for o in outs)
        assert a.requests == 3 and b.requests == 3
        assert a.max_in_flight + b.max_in_flight <= 3 and max(a.max_in_flight, b.max_in_flight) <= 2
        # A dead server among several: the retry moves to the next one.
        dead = f"http://127.0.0.1:{_free_port()}/v1"
        outs = _backend([dead, a.url], concurrency=2).generate(reqs[:2])
        assert all(o.text.strip() for o in outs)
    finally:
        a.close()
        b.close()


def test_cli_answers_via_openai_backend(proxy, tmp_path):
    from click.testing import CliRunner

    from sage.cli.main import cli

    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nq1,Is it wrong to lie?\nq2,Should you help a stranger?\n")
    args = ["generate", "answers", "--questions", str(q), "--model", "smollm2-135m", "--backend", "openai",
            "--base-url", proxy.url, "--max-new-tokens", "6", "-s", "2", "-t", "0.8",
            "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "c.sqlite")]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_csv(tmp_path / "out" / "answers.csv")
    assert len(df) == 4 and df["answer"].notna().all()
    served = proxy.requests
    assert CliRunner().invoke(cli, args).exit_code == 0 and proxy.requests == served  # resumed: no calls


def test_finished_requests_of_a_failed_batch_are_cached(proxy, tmp_path):
    from sage.generation.cache import CachedBackend, GenerationCache

    proxy.faults = ["500"]  # the first request fails for good (no retries); the second succeeds
    cached = CachedBackend(_backend([proxy.url], max_retries=0, concurrency=1),
                           GenerationCache(tmp_path / "cache.sqlite"))
    reqs = [_chat("Is it fair to cut in line?", n=3), _chat("Should you keep a promise?", n=3)]
    with pytest.raises(BackendError, match="HTTP 500"):
        cached.generate(reqs)
    assert proxy.requests == 2
    outs = cached.generate(reqs)  # only the failed request goes to the server again
    assert proxy.requests == 3 and all(o.text.strip() for o in outs)
    assert [o.cached for o in outs] == [False, True]


def test_judge_p_yes_from_server_top_logprobs_equals_llamacpp_logits(llama_server, tmp_path):
    """The LLM judge through the OpenAI-compatible backend on a real llama.cpp server: P(yes) from
    the first position's top_logprobs equals a softmax over the two tokens' logits that llama.cpp
    computes in process for the same prompt."""
    import numpy as np
    from fixtures_judge import ANSWERS, QUESTION, llamacpp_direct_p_yes
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from sage.metrics.judge import JudgeSimilarity
    from sage.models.causal_lm import model_dir
    from sage.models.resolve import bundled_generator_gguf

    sim = JudgeSimilarity("smollm2-135m", backend="openai", base_urls=(f"{llama_server}/v1",),
                          cache_path=str(tmp_path / "c.sqlite"))
    p = sim.directional([ANSWERS[:2]], [QUESTION])[0]
    tok = AutoTokenizer.from_pretrained(str(model_dir("smollm2-135m")))
    llm = Llama(model_path=str(bundled_generator_gguf()), n_ctx=1024, logits_all=True, n_threads=1, verbose=False)
    try:
        for i, j in ((0, 1), (1, 0)):
            ref = llamacpp_direct_p_yes(llm, tok, ANSWERS[i], ANSWERS[j], QUESTION)
            assert np.isfinite(p[i, j]) and 0.0 <= p[i, j] <= 1.0
            assert p[i, j] == pytest.approx(ref, abs=1e-3)
    finally:
        llm.close()
    assert sim.n_fallback == 0 and sim.warnings() == []


def test_judge_without_logprobs_falls_back_to_the_greedy_answer_with_a_warning(proxy, tmp_path):
    import pandas as pd
    from fixtures_judge import ANSWERS, QUESTION

    from sage.metrics.similarity import SimilarityOptions
    from sage.scoring import score_responses

    proxy.strip_logprobs = True
    df = pd.DataFrame({"question_id": "q1", "question": QUESTION, "answer": ANSWERS[:2], "sample": [0, 1]})
    options = SimilarityOptions(judge_model="smollm2-135m", judge_backend="openai", judge_base_urls=(proxy.url,),
                                cache_path=str(tmp_path / "c.sqlite"))
    res = score_responses(df, metrics=("sge", "se"), sge_edges=("judge",), similarity=options, progress=False,
                          n_boot=10)
    e = res.edges.iloc[0]
    assert e["judge_p_yes_ab"] in (0.0, 0.5, 1.0) and e["judge_p_yes_ba"] in (0.0, 0.5, 1.0)
    assert len(res.summary["warnings"]) == 1 and "2 of 2 pair judgments" in res.summary["warnings"][0]
    assert res.summary["similarities"]["judge"]["greedy_fallbacks"] == 2
