"""Issue 54: what each OpenAI-compatible server fault gives the user, against real HTTP servers on
loopback (`tests/fixtures_openai_server.py`, no model): the cache keys on the server, Ctrl-C stops
spending and keeps what arrived, a corrupt cache file is moved aside, a prompt the server refuses
(400) or answers with null content is a counted failed answer, a refused key (401/403) stops at
once, and 429's Retry-After is honoured."""
from __future__ import annotations

import email.utils
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pandas as pd
import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.backend_registry import BackendError, BackendOptions
from sage.generation.cache import CachedBackend, GenerationCache
from sage.generation.openai_backend import OpenAIBackend
from tests.fixtures_cli import REPO, assert_clean_error, run_sage
from tests.fixtures_openai_server import FakeOpenAI, Reply, error


@pytest.fixture
def server():
    s = FakeOpenAI("A")
    yield s
    s.close()


def _backend(*urls, model="default", **kw) -> OpenAIBackend:
    opts = dict(base_urls=tuple(urls), max_retries=2, backoff=0.001, timeout=30.0, concurrency=4)
    opts.update(kw)
    return OpenAIBackend(model, BackendOptions(**opts))


def _chat(text: str) -> GenerationRequest:
    return GenerationRequest(messages=(("user", text),), params=SamplingParams(max_new_tokens=8))


def _questions(tmp_path, n: int):
    q = tmp_path / "q.csv"
    q.write_text("question_id,question\n" + "".join(f"q{i},Is it wrong to do thing {i}?\n" for i in range(n)))
    return q


def _answers_cmd(server, tmp_path, questions, *extra):
    return ["generate", "answers", "--questions", questions, "--model", "default", "--backend", "openai",
            "--base-url", server.url, "--out", tmp_path / "out", "--cache", tmp_path / "c.sqlite", "--no-progress",
            *extra]


def _rows(path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM generations_v2").fetchone()[0]


# ----------------------------------------------------------------------------- item 2: the cache keys on the server
def test_the_same_model_name_on_another_server_is_not_served_the_first_servers_answers(tmp_path):
    a, b = FakeOpenAI("A"), FakeOpenAI("B")
    try:
        reqs = [_chat("Is it wrong to lie?"), _chat("Should you keep a promise?")]
        db = tmp_path / "gen.sqlite"
        first = CachedBackend(_backend(a.url), GenerationCache(db))
        assert [g.text for g in first.generate(reqs)] == ["A: Is it wrong to lie?", "A: Should you keep a promise?"]
        second = CachedBackend(_backend(b.url), GenerationCache(db))
        outs = second.generate(reqs)
        assert [g.text for g in outs] == ["B: Is it wrong to lie?", "B: Should you keep a promise?"]
        assert second.calls == 2 and len(b.posts) == 2 and not any(g.cached for g in outs)
        again = CachedBackend(_backend(a.url), GenerationCache(db))  # each server's answers stay its own
        assert [g.text for g in again.generate(reqs)][0] == "A: Is it wrong to lie?" and again.calls == 0
        assert len(a.posts) == 2
        # The model card is part of the identity: the server now serves other weights under the same name.
        a.models = [{"id": "default", "object": "model", "created": 1, "owned_by": "llamacpp",
                     "meta": {"n_params": 135000000, "size": 1000}}]
        swapped = CachedBackend(_backend(a.url), GenerationCache(db))
        assert swapped.identity()["endpoints"] == [{"url": a.url, "served": {
            "id": "default", "owned_by": "llamacpp", "meta": {"n_params": 135000000, "size": 1000}}}]
        swapped.generate(reqs)
        assert swapped.calls == 2 and len(a.posts) == 4
        a.models[0]["created"] = 2  # llama.cpp and vLLM report the request's time here: not identity
        assert CachedBackend(_backend(a.url), GenerationCache(db)).identity() == swapped.identity()
        # Several servers: the set of URLs, whatever their order.
        assert _backend(a.url, b.url).identity() == _backend(b.url, a.url).identity()
    finally:
        a.close()
        b.close()


def test_a_server_without_a_model_list_is_keyed_on_its_url(server):
    server.models = []  # lists nothing for this name
    ident = _backend(server.url, model="other").identity()
    assert ident == {"backend": "openai", "model": "other", "endpoints": [{"url": server.url, "served": None}]}


# ----------------------------------------------------------------------------- item 3: Ctrl-C stops spending
def test_ctrl_c_sends_no_queued_request_and_keeps_the_answers_in_flight(server, tmp_path):
    """12 questions, 4 in flight: the server holds the 4 it has until the CLI has said it was
    interrupted; then no further request arrives, the 4 answers are cached, and the rerun asks
    only for the 8 others."""
    q = _questions(tmp_path, 12)
    cmd = [sys.executable, "-m", "sage", *map(str, _answers_cmd(server, tmp_path, q, "--concurrency", "4"))]
    server.hold = True
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server.wait_for_posts(4)
        proc.send_signal(signal.SIGINT)
        seen = []
        for line in proc.stderr:  # until the CLI says it stopped sending (or it exits: a failure below)
            seen.append(line)
            if "queued requests not sent" in line:
                break
        server.release.set()
        rest = proc.stderr.read()
        proc.wait()
    finally:
        server.release.set()
        if proc.poll() is None:
            proc.kill()
    err = "".join(seen) + rest
    assert "interrupted: 8 queued requests not sent; waiting for the 4 in flight" in err, err
    assert proc.returncode == 130, err
    assert "interrupted: 4 answers from default kept in the generation cache" in err
    assert "rerun the same command to resume" in err and "Traceback" not in err
    assert len(server.posts) == 4
    assert _rows(tmp_path / "c.sqlite") == 4
    server.hold = False
    done = run_sage(*_answers_cmd(server, tmp_path, q, "--concurrency", "4"))
    assert done.returncode == 0, done.stderr
    assert len(server.posts) == 12  # the 4 kept answers come from the cache
    assert len({p.prompt for p in server.posts}) == 12
    df = pd.read_csv(tmp_path / "out" / "answers.csv")
    assert len(df) == 12 and df["answer"].str.startswith("A:").all()


# ----------------------------------------------------------------------------- item 7: a corrupt cache file
def _callable(name: str):
    from sage.generation.callable_backend import CallableBackend, register_function

    return CallableBackend(register_function(name, lambda q: f"{name} says: {q}"))


def _reqs(n: int):
    return [GenerationRequest(messages=(("user", f"q{i}"),), params=SamplingParams(max_new_tokens=4),
                              inputs=(("question", f"question {i} " + "x" * 300),)) for i in range(n)]


def test_an_intact_cache_is_served_and_never_moved(tmp_path):
    db = tmp_path / "generations.sqlite"
    reqs = _reqs(50)
    CachedBackend(_callable("fn-a"), GenerationCache(db)).generate(reqs)
    again = CachedBackend(_callable("fn-a"), GenerationCache(db))
    assert all(g.cached for g in again.generate(reqs)) and again.calls == 0
    other_app = tmp_path / "other.sqlite"  # a database of something else: sage's table is added, nothing moved
    with sqlite3.connect(other_app) as conn:
        conn.execute("CREATE TABLE notes (t TEXT)")
    GenerationCache(other_app).put_many([])
    assert not [p for p in tmp_path.iterdir() if "corrupt" in p.name]
    with sqlite3.connect(other_app) as conn:
        assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master")} >= {"notes", "generations_v2"}


@pytest.mark.parametrize("damage", ["junk", "truncated"])
def test_a_corrupt_cache_file_is_moved_aside_with_a_warning_and_a_new_one_started(tmp_path, damage, caplog):
    db = tmp_path / "generations.sqlite"
    reqs = _reqs(200)
    first = CachedBackend(_callable("fn-b"), GenerationCache(db))
    first.generate(reqs)
    first.cache.close()
    data = db.read_bytes()
    broken = b"this is not a database\n" * 64 if damage == "junk" else data[: len(data) // 2]
    db.write_bytes(broken)
    with caplog.at_level(logging.WARNING, logger="sage.generation.cache"):
        cached = CachedBackend(_callable("fn-b"), GenerationCache(db))
        outs = cached.generate(reqs)
    assert [g.text for g in outs] == [f"fn-b says: {r.inputs[0][1]}" for r in reqs]
    assert cached.calls == len(reqs)  # the broken file's answers are generated again
    [aside] = tmp_path.glob("generations.sqlite.corrupt-*")
    assert aside.read_bytes() == broken
    [msg] = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert str(db) in msg and str(aside) in msg
    assert _rows(db) == len(reqs)  # the new cache holds them
    assert CachedBackend(_callable("fn-b"), GenerationCache(db)).generate(reqs)[0].cached


def test_the_cli_runs_on_with_a_corrupt_cache_and_names_the_file(server, tmp_path):
    (tmp_path / "c.sqlite").write_bytes(b"\x00junk" * 500)
    proc = run_sage(*_answers_cmd(server, tmp_path, _questions(tmp_path, 2)))
    assert proc.returncode == 0, proc.stderr
    assert "generation cache" in proc.stderr and str(tmp_path / "c.sqlite") in proc.stderr
    assert "c.sqlite.corrupt-" in proc.stderr and len(server.posts) == 2


# ----------------------------------------------------------------------------- items 9 and 12: failed answers
CONTEXT = "This model's maximum context length is 2048 tokens. However, your messages resulted in 5000 tokens."


def _refusing(prompt: str):
    if "LONG" in prompt:
        return error(400, CONTEXT)
    if "SILENT" in prompt:
        return Reply(content=None, finish_reason="content_filter")
    return None


def test_a_refused_prompt_and_null_content_are_failed_answers_and_the_rest_go_on(server, tmp_path):
    server.rule = _refusing
    reqs = [_chat("Is it fair? LONG"), _chat("Is it kind?"), _chat("Is it SILENT?")]
    cached = CachedBackend(_backend(server.url), GenerationCache(tmp_path / "c.sqlite"))
    long_, fine, silent = cached.generate(reqs)
    assert fine.text == "A: Is it kind?" and fine.error is None
    assert long_.text == "" and CONTEXT in long_.error and "HTTP 400" in long_.error and server.url in long_.error
    assert silent.text == "" and "null content" in silent.error and "content_filter" in silent.error
    assert len(server.posts) == 3 and _rows(tmp_path / "c.sqlite") == 1  # failed answers are not cached
    server.rule = lambda prompt: error(404, "model 'default' not found")  # refuses every prompt: the run stops
    with pytest.raises(BackendError) as err:
        _backend(server.url).generate([_chat("Another?")])
    assert "model 'default' not found" in str(err.value) and "check the model name" in str(err.value)


@pytest.mark.slow  # scores with the bundled embedder
def test_score_finishes_with_failed_answers_counted_and_listed(server, tmp_path):
    """Question c: one paraphrase over the context length, one answered with null content, one
    answered: c is undefined (one answer), both failures are in summary.json's warnings and
    `failed_answers`; a rerun on the same --out sends nothing."""
    server.rule = _refusing
    q = tmp_path / "q.csv"
    rows = [("a", "Is cheating wrong?", p) for p in ("Is it wrong to cheat?", "Is cheating unethical?")]
    rows += [("b", "Is stealing wrong?", p) for p in ("Is it wrong to steal?", "Is theft wrong?")]
    rows += [("c", "Is lying wrong?", p) for p in ("Is it wrong to lie? LONG", "Is lying SILENT?", "Should one lie?")]
    pd.DataFrame(rows, columns=["question_id", "question", "paraphrase"]).to_csv(q, index=False)
    args = ["score", "--model", "default", "--base-url", server.url, "--questions", q, "--metrics", "sge",
            "--n-boot", "10", "--out", tmp_path / "run", "--no-progress"]
    env = {**os.environ, "SAGE_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_sage(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    failed = summary["failed_answers"]
    assert failed["n"] == 4  # the two answers, and the RoTs of the same two paraphrases
    assert {(f["question_id"], f.get("stage", "answer")) for f in failed["items"]} == {("c", "answer"), ("c", "rot")}
    [warning] = [w for w in summary["warnings"] if "failed on the server" in w]
    assert CONTEXT in warning and "null content" in warning and "question c paraphrase 1 sample 0" in warning
    assert "warning: 4 generation(s) failed on the server" in proc.stderr
    assert [u["question_id"] for u in summary["undefined_questions"]] == ["c"]
    assert "check the model name and the API key" not in proc.stderr
    sent = len(server.posts)
    assert run_sage(*args, env=env).returncode == 0 and len(server.posts) == sent


def test_generate_answers_lists_the_failed_answers(server, tmp_path):
    server.rule = _refusing
    q = tmp_path / "q.csv"
    q.write_text("question_id,question\nq1,Is it wrong to lie? LONG\nq2,Should you help?\n")
    proc = run_sage(*_answers_cmd(server, tmp_path, q))
    assert proc.returncode == 0, proc.stderr
    assert "1 answers failed on the server" in proc.stdout and "q1/0/0" in proc.stdout and CONTEXT in proc.stdout
    df = pd.read_csv(tmp_path / "out" / "answers.csv", keep_default_na=False)
    assert df["answer"][0] == "" and df["answer"][1].startswith("A: ") and len(server.posts) == 2


# ----------------------------------------------------------------------------- item 10: a refused key
@pytest.mark.parametrize("status,concurrency", [(401, 1), (401, 3), (403, 3)])
def test_a_refused_key_stops_at_the_first_reply(server, tmp_path, status, concurrency):
    server.rule = lambda prompt: error(status, "Incorrect API key provided: sk-local")
    proc = run_sage(*_answers_cmd(server, tmp_path, _questions(tmp_path, 12), "--concurrency", str(concurrency)))
    assert_clean_error(proc, server.url, "API key", "OPENAI_API_KEY", f"HTTP {status}", "Incorrect API key provided")
    assert 1 <= len(server.posts) <= concurrency  # at most the requests already in flight


# ----------------------------------------------------------------------------- item 11: Retry-After
def _retries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retry 1/" in r.getMessage()]


def test_retry_after_in_seconds_is_waited_for(server, caplog):
    """Without the header the retry would wait backoff (1 ms) * U[0.5, 1.5); the server asked for 1 s.
    The gap on the server's clock is a lower bound only (sleeping never takes less)."""
    server.script = [Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"})]
    with caplog.at_level(logging.INFO, logger="sage.generation.openai_backend"):
        [out] = _backend(server.url).generate([_chat("Is it fair?")])
    assert out.text == "A: Is it fair?" and len(server.posts) == 2
    [msg] = _retries(caplog)
    assert "in 1.00 s (the server's Retry-After)" in msg
    assert server.posts[1].arrived - server.posts[0].arrived >= 1.0


def test_retry_after_as_an_http_date_is_capped_by_the_timeout(server, caplog):
    an_hour = email.utils.formatdate(time.time() + 3600, usegmt=True)
    server.script = [Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": an_hour})]
    with caplog.at_level(logging.INFO, logger="sage.generation.openai_backend"):
        [out] = _backend(server.url, timeout=1.5).generate([_chat("Is it fair?")])
    assert out.text == "A: Is it fair?" and len(server.posts) == 2
    [msg] = _retries(caplog)
    assert "in 1.50 s (the server's Retry-After)" in msg
    assert server.posts[1].arrived - server.posts[0].arrived >= 1.5


def test_retry_after_forms():
    import httpx

    from sage.generation.openai_backend import retry_after

    def after(**headers):
        return retry_after(httpx.Response(429, headers=headers))

    assert after(**{"Retry-After": "2.5"}) == 2.5
    assert after(**{"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    in_two_minutes = after(**{"Retry-After": email.utils.formatdate(time.time() + 120, usegmt=True)})
    assert 100 < in_two_minutes <= 120
    assert after(**{"Retry-After": email.utils.formatdate(time.time() - 120, usegmt=True)}) == 0.0
    assert after(**{"Retry-After": "soon"}) is None and after() is None
