"""LLM-judge edges on the bundled SmolLM2-135M: P(yes) from candidate log-probabilities equals a
softmax over the two tokens' logits computed straight from the model, through the transformers
backend and the in-process llama.cpp backend; calls are cached with their candidate log-probs.
(The llama.cpp *server* path is tested in test_generation_openai.py, next to its server fixture.)"""
from __future__ import annotations

import importlib.util
import json
import sqlite3

import numpy as np
import pytest
from fixtures_judge import ANSWERS, QUESTION, hf_direct_p_yes, llamacpp_direct_p_yes

from sage.api import Generation, GenerationRequest, SamplingParams


def _judge(tmp_path, **kw):
    from sage.metrics.judge import JudgeSimilarity

    return JudgeSimilarity("smollm2-135m", device="cpu", cache_path=str(tmp_path / "judge.sqlite"), **kw)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_transformers_judge_equals_direct_two_token_softmax(bundled_lm, tmp_path):
    sim = _judge(tmp_path, backend="transformers")
    assert sim.candidates == ("Yes", "No")
    p = sim.directional([ANSWERS], [QUESTION])[0]
    n = len(ANSWERS)
    for i in range(n):
        for j in range(n):
            if i != j:
                ref = hf_direct_p_yes(bundled_lm, ANSWERS[i], ANSWERS[j], QUESTION)
                assert np.isfinite(p[i, j]) and 0.0 <= p[i, j] <= 1.0
                assert p[i, j] == pytest.approx(ref, abs=1e-4)
    assert np.all(np.diag(p) == 1.0)
    np.testing.assert_allclose(sim.matrices([ANSWERS], [QUESTION])[0], (p + p.T) / 2)
    rel = sim.relations([ANSWERS], [QUESTION])[0]
    np.testing.assert_array_equal(rel.entails, p > 0.5)
    assert sim.n_fallback == 0 and sim.warnings() == []
    # Without a question the other documented prompt is used.
    p_noq = sim.directional([ANSWERS[:2]])[0]
    assert p_noq[0, 1] == pytest.approx(hf_direct_p_yes(bundled_lm, ANSWERS[0], ANSWERS[1], None), abs=1e-4)

    # A new judge on the same cache (a rerun) makes no model calls and gives the same numbers.
    again = _judge(tmp_path, backend="transformers")
    np.testing.assert_allclose(again.directional([ANSWERS], [QUESTION])[0], p)
    assert again.backend.calls == 0


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_candidate_logprobs_equal_full_softmax_in_a_padded_batch(bundled_lm):
    """Each row of a left-padded batch gets log_softmax over the whole vocabulary at its first step."""
    import torch

    from sage.generation.backend_registry import BackendOptions
    from sage.generation.hf import TransformersBackend

    backend = TransformersBackend.from_loaded(bundled_lm, "smollm2-135m", BackendOptions(device="cpu", batch_size=4))
    params = SamplingParams(max_new_tokens=2, candidates=("Yes", "No", " maybe"), logprobs=True)
    prompts = ["Hi", "Is it wrong to break a promise to a child? Answer yes or no."]
    outs = backend.generate([GenerationRequest(messages=(("user", p),), params=params) for p in prompts])
    tok = bundled_lm.tokenizer
    for prompt, gen in zip(prompts, outs):
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            logp = torch.log_softmax(bundled_lm.model(input_ids=ids).logits[0, -1].double(), -1)
        for cand, lp in gen.candidate_logprobs.items():
            assert lp == pytest.approx(logp[tok(cand, add_special_tokens=False)["input_ids"][0]].item(), abs=1e-4)
        # the greedy first token's own log-prob is the same number when it is a candidate
        first = tok.decode(torch.tensor([logp.argmax().item()]))
        if first in gen.candidate_logprobs:
            assert gen.token_logprobs[0] == pytest.approx(gen.candidate_logprobs[first], abs=1e-5)


@pytest.mark.slow
def test_llamacpp_judge_equals_llamacpp_logits(bundled_lm, tmp_path):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs llama-cpp-python: pip install 'sage-consistency[bundled]'")
    from llama_cpp import Llama

    from sage.models.resolve import bundled_generator_gguf

    sim = _judge(tmp_path, backend="llamacpp")
    p = sim.directional([ANSWERS[:2]], [QUESTION])[0]
    ref_llm = Llama(model_path=str(bundled_generator_gguf()), n_ctx=1024, logits_all=True, n_threads=1, verbose=False)
    try:
        for i, j in ((0, 1), (1, 0)):
            ref = llamacpp_direct_p_yes(ref_llm, bundled_lm.tokenizer, ANSWERS[i], ANSWERS[j], QUESTION)
            assert np.isfinite(p[i, j]) and 0.0 <= p[i, j] <= 1.0
            assert p[i, j] == pytest.approx(ref, abs=1e-3)
    finally:
        ref_llm.close()
    # The greedy first token's log-prob (llama.cpp's own `logprobs`) equals its candidate log-prob.
    req = GenerationRequest(messages=(("user", "Is lying wrong? Answer Yes or No."),),
                            params=SamplingParams(max_new_tokens=1, candidates=("Yes", "No"), logprobs=True))
    gen = sim.backend.inner.generate([req])[0]
    assert set(gen.candidate_logprobs) == {"Yes", "No"}
    if gen.text in gen.candidate_logprobs:
        assert gen.token_logprobs[0] == pytest.approx(gen.candidate_logprobs[gen.text], abs=1e-5)
    sim.close()


def test_cache_keeps_candidate_logprobs_and_adds_the_column_to_a_table_without_it(tmp_path):
    from sage.generation.cache import _TABLE, GenerationCache, request_key

    path = tmp_path / "c.sqlite"
    con = sqlite3.connect(path)  # a table of this key schema as written before candidate log-probs existed
    con.execute(f"CREATE TABLE {_TABLE} (key TEXT PRIMARY KEY, identity TEXT NOT NULL, request TEXT NOT NULL, "
                "text TEXT NOT NULL, token_logprobs TEXT, finish_reason TEXT, created REAL NOT NULL)")
    con.execute(f"INSERT INTO {_TABLE} VALUES ('k0', '{{}}', '{{}}', 'old text', '[-0.5]', 'stop', 0)")
    con.commit()
    con.close()
    cache = GenerationCache(path)
    assert cache.get_many(["k0"])["k0"].text == "old text"
    assert cache.get_many(["k0"])["k0"].candidate_logprobs is None
    ident = {"backend": "transformers", "model": "m"}
    req = GenerationRequest(prompt="p", params=SamplingParams(candidates=("Yes", "No")))
    key = request_key(ident, req)
    assert key != request_key(ident, GenerationRequest(prompt="p"))  # candidates are part of the key
    cache.put_many([(key, ident, req, Generation("No", candidate_logprobs={"Yes": -2.0, "No": float("-inf")}))])
    got = GenerationCache(path).get_many([key])[key]
    assert got.candidate_logprobs == {"Yes": -2.0, "No": float("-inf")} and got.cached
    stored = sqlite3.connect(path).execute(f"SELECT request FROM {_TABLE} WHERE key = ?", (key,)).fetchone()[0]
    assert json.loads(stored)["params"]["candidates"] == ["Yes", "No"]


@pytest.mark.slow
def test_candidates_are_tokenized_in_context(bundled_lm):
    from sage.generation.backend_registry import first_token_after

    tok = bundled_lm.tokenizer

    def enc(t):
        return tok(t, add_special_tokens=False)["input_ids"]

    yes, space_yes = enc("Yes")[0], enc(" Yes")[0]
    assert yes != space_yes
    assert first_token_after(enc, "Assistant:", " Yes") == space_yes  # written after a colon, with its space
    assert first_token_after(enc, "<|im_start|>assistant\n", "Yes") == yes
    # A candidate that merges with the prompt's last token falls back to the candidate alone.
    assert first_token_after(enc, "Is it goo", "d") == enc("d")[0]
