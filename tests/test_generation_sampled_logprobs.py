"""Log-probabilities of the distribution actually sampled from (temperature, top-p), as semantic
entropy's reference records them (`compute_transition_scores(normalize_logits=True)` over the
warped scores), next to the model's own, on the bundled SmolLM2 at temperatures other than 1.

The independent reference: the model run once over prompt + generated tokens (teacher forcing),
with transformers' own TemperatureLogitsWarper and TopPLogitsWarper."""
from __future__ import annotations

import math

import pytest

from sage.api import Generation, GenerationRequest, SamplingParams
from sage.pipeline.stages import logprob_fields

PROMPTS = ["Is it wrong to lie to a friend to spare their feelings?",
           "Should you return a lost wallet that is full of cash?"]


def test_logprob_fields_name_both_distributions():
    gen = Generation(text="x", token_logprobs=[-1.0, -2.0], sampled_logprobs=[-0.5, -1.5])
    hot = SamplingParams(temperature=0.7, logprobs=True)
    assert logprob_fields("answer", gen, hot) == {"answer_logprob": -3.0, "answer_tokens": 2,
                                                  "answer_logprob_sampled": -2.0}
    # a backend that reports only the model's log-probs: the sampled column only where they are the same
    raw = Generation(text="x", token_logprobs=[-1.0, -2.0])
    assert "answer_logprob_sampled" not in logprob_fields("answer", raw, hot)
    for same in (SamplingParams(temperature=1.0, logprobs=True), SamplingParams(temperature=0.0, logprobs=True)):
        assert logprob_fields("answer", raw, same)["answer_logprob_sampled"] == -3.0
    assert not SamplingParams(temperature=1.0, top_p=0.9).samples_model_distribution
    assert logprob_fields("answer", Generation(text="x"), hot) == {}


@pytest.fixture(scope="module")
def backend():
    from sage.generation.backend_registry import BackendOptions
    from sage.generation.hf import TransformersBackend
    from tests.test_generation_transformers import generator_name

    return TransformersBackend(generator_name(), BackendOptions(device="cpu", batch_size=4))


def _teacher_forced(backend, req, gen, params):
    """Per generated token: log-softmax of the logits, and of the warped logits (transformers' warpers)."""
    import torch
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    prompt = backend.prompts.ids(req)
    ids = backend.lm.tokenizer(gen.text, add_special_tokens=False)["input_ids"][:len(gen.token_logprobs)]
    assert len(ids) == len(gen.token_logprobs), "the generated text re-tokenizes to other tokens"
    seq = torch.tensor([prompt + ids])
    with torch.inference_mode():
        logits = backend.lm.model(input_ids=seq).logits[0, len(prompt) - 1:-1].float()
    raw, warped = [], []
    for k, t in enumerate(ids):
        row = logits[k:k + 1]
        raw.append(torch.log_softmax(row, -1)[0, t].item())
        w = TemperatureLogitsWarper(params.temperature)(seq[:, :len(prompt) + k], row)
        if params.top_p < 1:
            w = TopPLogitsWarper(params.top_p)(seq[:, :len(prompt) + k], w)
        warped.append(torch.log_softmax(w, -1)[0, t].item())
    return raw, warped


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("temperature,top_p", [(0.7, 0.9), (1.4, 1.0)])
def test_sampled_logprobs_are_of_the_warped_distribution(backend, temperature, top_p):
    params = SamplingParams(max_new_tokens=8, temperature=temperature, top_p=top_p, seed=1, logprobs=True)
    reqs = [GenerationRequest(messages=(("user", p),), params=params) for p in PROMPTS]
    gens = backend.generate(reqs)
    differs = 0
    for req, gen in zip(reqs, gens):
        assert len(gen.sampled_logprobs) == len(gen.token_logprobs) >= 1
        raw, warped = _teacher_forced(backend, req, gen, params)
        assert gen.token_logprobs == pytest.approx(raw, abs=2e-3)
        assert gen.sampled_logprobs == pytest.approx(warped, abs=2e-3)
        assert all(math.isfinite(x) and x <= 1e-6 for x in gen.sampled_logprobs)
        differs += sum(abs(a - b) > 1e-3 for a, b in zip(gen.sampled_logprobs, gen.token_logprobs))
    assert differs > 0  # at T != 1 the two are different numbers


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_greedy_and_cache_rows_without_sampled_logprobs(backend, tmp_path):
    import sqlite3

    from sage.generation.cache import _TABLE, CachedBackend, GenerationCache

    greedy = backend.generate([GenerationRequest(messages=(("user", PROMPTS[0]),),
                                                 params=SamplingParams(max_new_tokens=5, logprobs=True))])[0]
    assert greedy.sampled_logprobs == greedy.token_logprobs  # greedy: the model's own distribution
    params = SamplingParams(max_new_tokens=5, temperature=0.7, seed=2, logprobs=True)
    req = GenerationRequest(messages=(("user", PROMPTS[1]),), params=params)
    cached = CachedBackend(backend, GenerationCache(tmp_path / "gen.sqlite"))
    first = cached.generate([req])[0]
    assert cached.calls == 1 and first.sampled_logprobs is not None
    # a row written by an older sage (no sampled log-probs) is generated again, then served
    conn = sqlite3.connect(tmp_path / "gen.sqlite")
    conn.execute(f"UPDATE {_TABLE} SET sampled_logprobs = NULL")
    conn.commit()
    conn.close()
    again = CachedBackend(backend, GenerationCache(tmp_path / "gen.sqlite"))
    second = again.generate([req])[0]
    assert again.calls == 1 and second.text == first.text
    assert second.sampled_logprobs == pytest.approx(first.sampled_logprobs, abs=1e-6)
    third = again.generate([req])[0]
    assert again.calls == 1 and third.cached and third.sampled_logprobs is not None
