"""Every architecture profile drives a real edit: tiny randomly initialised models of each
supported architecture (built from their transformers config classes, nothing downloaded) are
edited by ROME and MEMIT through the profile's module paths, change exactly the profile's
down-projections, and are restored bit for bit."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fixtures_editing import assert_suffix_rows_match_full_forward

from sage.editing.editor_base import make_editor
from sage.editing.handles import state_hashes
from sage.editing.profiles import PROFILES, profile_for
from sage.models.causal_lm import LoadedModel

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]  # loads the bundled model


def _tiny(arch: str, vocab: int):
    import transformers as tf

    small = dict(vocab_size=vocab)
    configs = {
        "LlamaForCausalLM": ("LlamaConfig", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                                  num_attention_heads=2, num_key_value_heads=1)),
        "MistralForCausalLM": ("MistralConfig", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                                      num_attention_heads=2, num_key_value_heads=1)),
        "Qwen2ForCausalLM": ("Qwen2Config", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                                  num_attention_heads=2, num_key_value_heads=1)),
        "GPT2LMHeadModel": ("GPT2Config", dict(n_embd=32, n_layer=3, n_head=2)),
        "GPTJForCausalLM": ("GPTJConfig", dict(n_embd=32, n_layer=3, n_head=2, rotary_dim=8)),
        "FalconForCausalLM": ("FalconConfig", dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2)),
        "GPTNeoXForCausalLM": ("GPTNeoXConfig", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                                      num_attention_heads=2)),
    }
    cfg_name, kw = configs[arch]
    torch.manual_seed(0)
    config = getattr(tf, cfg_name)(**small, **kw)
    config.architectures = [arch]
    return getattr(tf, arch)(config).eval()


@pytest.fixture(scope="module")
def tokenizer(bundled_lm):
    return bundled_lm.tokenizer


@pytest.fixture(scope="module")
def req(countermoral_dir):
    from sage.editing.dataset import load_countermoral

    return load_countermoral(countermoral_dir, "care_ethics", "broad", 2)


@pytest.mark.parametrize("arch", sorted(PROFILES))
def test_profile_edits_the_right_module_and_restores(arch, tokenizer, req):
    model = _tiny(arch, len(tokenizer))
    profile = profile_for(model)
    assert profile.architecture == arch
    lm = LoadedModel(name=f"tiny-{arch}", path=Path("."), model=model, tokenizer=tokenizer)
    before = state_hashes(model)
    fast = {"n_context": 0, "v_steps": 3, "covariance": "identity"}
    for method, extra in (("rome", {"layer": 1}), ("memit", {"layers": [0, 1]})):
        handle = make_editor(method, {**fast, **extra}).apply(lm, req[:1] if method == "rome" else req)
        during = state_hashes(model)
        changed = {k for k in before if before[k] != during[k]}
        layers = [1] if method == "rome" else [0, 1]
        assert changed == {f"p:{profile.mlp_out.format(i)}.weight" for i in layers}, (method, changed)
        if method == "rome":  # a rank-one update in the profile's [value, key] orientation
            snap = handle._snapshot._saved[f"{profile.mlp_out.format(1)}.weight"][1]
            dw = profile.weight_kv(model, 1).detach() - (snap.T if profile.conv1d else snap)
            assert torch.linalg.matrix_rank(dw.double(), rtol=1e-6) == 1
        handle.restore()
        assert state_hashes(model) == before


@pytest.mark.parametrize("arch", sorted(PROFILES))
def test_value_rows_on_a_cached_prefix_match_full_rows(arch, tokenizer, req):
    """The prefix cache the value optimization reuses works with each architecture's attention
    (rotary, learned positions, ALiBi-free Falcon, GPT-J's partial rotary)."""
    model = _tiny(arch, len(tokenizer))
    assert_suffix_rows_match_full_forward(model, tokenizer, profile_for(model), 1, [req[:1], req[1:]],
                                          ["", "A longer context prefix. "])
