"""The shared locate-then-edit numerics on the bundled model: batched value optimization equals
one-at-a-time optimization, the prefix-cached suffix rows it runs equal a full forward pass, and
truncated batched activation capture equals a full forward pass."""
from __future__ import annotations

import pytest
import torch
from fixtures_editing import assert_suffix_rows_match_full_forward

from sage.editing.capture import context_templates, subject_activations, subject_keys
from sage.editing.dataset import load_countermoral
from sage.editing.profiles import profile_for
from sage.editing.value_optimization import (
    DeltaSettings,
    optimize_delta,
    optimize_deltas,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def reqs(countermoral_dir):
    return load_countermoral(countermoral_dir, "virtue_ethics", "broad", 3)


def test_batched_value_vectors_equal_single_ones(bundled_lm, reqs):
    model, tok = bundled_lm.model, bundled_lm.tokenizer
    profile = profile_for(model)
    contexts = context_templates(model, tok, 1, 5, 0)
    cfg = DeltaSettings(steps=4, lr=0.5, kl_factor=0.0625, weight_decay=0.5,
                                clamp_norm_factor=8.0, stop_nll=0.0, requests_per_batch=3)
    together = optimize_deltas(model, tok, profile, 4, reqs, contexts, cfg)
    alone = torch.stack([optimize_delta(model, tok, profile, 4, r, contexts, cfg) for r in reqs])
    assert together.shape == (3, model.config.hidden_size)
    assert together.norm(dim=-1).min() > 0  # every vector moved
    # equal up to float noise from different padding widths (which Adam's normalisation can
    # amplify in single coordinates whose gradient is near zero): compare whole vectors
    rel = (together - alone).norm(dim=-1) / alone.norm(dim=-1)
    assert rel.max() < 1e-3, rel


def test_truncated_keys_equal_full_forward(bundled_lm, reqs):
    model, tok = bundled_lm.model, bundled_lm.tokenizer
    profile = profile_for(model)
    contexts = ["", "Indeed. "]
    keys = subject_keys(model, tok, profile, 3, reqs, contexts)
    # two taps from the same (truncated) passes, as MEMIT takes them
    keys_too, outs = subject_activations(
        model, tok, reqs, contexts, [(profile.mlp_module(model, 3), False), (profile.layer_module(model, 3), True)])
    torch.testing.assert_close(keys_too, keys)
    ref_k, ref_h = [], []
    for r in reqs:
        ks, hs = [], []
        for c in contexts:
            got = {}
            h1 = profile.mlp_module(model, 3).register_forward_pre_hook(
                lambda _m, a: got.__setitem__("k", a[0][0, -1].float()))
            h2 = profile.layer_module(model, 3).register_forward_hook(
                lambda _m, _a, o: got.__setitem__("h", (o[0] if isinstance(o, tuple) else o)[0, -1].float()))
            with torch.no_grad():
                model(**tok(c + r.subject, return_tensors="pt"))  # one text, no padding, all layers
            h1.remove()
            h2.remove()
            ks.append(got["k"])
            hs.append(got["h"])
        ref_k.append(torch.stack(ks).mean(0))
        ref_h.append(torch.stack(hs).mean(0))
    torch.testing.assert_close(keys, torch.stack(ref_k), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs, torch.stack(ref_h), rtol=1e-4, atol=1e-4)


def test_value_rows_on_a_cached_prefix_equal_full_rows(bundled_lm, reqs):
    model, tok = bundled_lm.model, bundled_lm.tokenizer
    contexts = context_templates(model, tok, 2, 10, 0)
    # requests whose prefixes were computed in separate passes (different padded widths)
    assert_suffix_rows_match_full_forward(model, tok, profile_for(model), 4, [reqs[:1], reqs[1:]], contexts)


def test_value_rows_without_any_prefix(bundled_lm, reqs):
    """No context and a one-token subject: that request has no prefix at all, next to one that has."""
    import dataclasses

    model, tok = bundled_lm.model, bundled_lm.tokenizer
    word = next(w for w in ("Lying", "Stealing", "Helping", "Honesty")
                if len(tok(w).input_ids) == 1)
    one_token = dataclasses.replace(reqs[0], subject=word)
    assert_suffix_rows_match_full_forward(model, tok, profile_for(model), 4, [[one_token], [reqs[1]]], [""])
    assert_suffix_rows_match_full_forward(model, tok, profile_for(model), 4, [[one_token]], [""])
