"""FT-L's and FT-M's losses against a hand computation on a tiny random Llama (the bundled
tokenizer; two requests of different lengths, so left padding is exercised too)."""
from __future__ import annotations

import pytest
import torch

from sage.editing.target_scoring import prompt_last_nll, target_nll

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

PROMPTS = ["Telling the truth is recognized as", "Lying is"]
TARGETS = ["restrictive self-disclosure", "bad"]


@pytest.fixture(scope="module")
def tiny(bundled_lm):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = bundled_lm.tokenizer
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, architectures=["LlamaForCausalLM"])
    return LlamaForCausalLM(cfg).eval(), tok


def _ids(tok, prompt, target):
    return tok(prompt).input_ids, tok(" " + target, add_special_tokens=False).input_ids


def test_ft_l_predicts_every_target_token_from_the_last_prompt_position(tiny):
    model, tok = tiny
    want = []
    for p, t in zip(PROMPTS, TARGETS):
        p_ids, t_ids = _ids(tok, p, t)
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([p_ids])).logits[0, -1].float(), -1)
        want.append(-logp[t_ids].mean())
    got = prompt_last_nll(model, tok, PROMPTS, TARGETS)
    torch.testing.assert_close(got.detach(), torch.stack(want).mean(), rtol=1e-5, atol=1e-5)


def test_ft_m_is_the_teacher_forced_nll_of_the_whole_target(tiny):
    model, tok = tiny
    want = []
    for p, t in zip(PROMPTS, TARGETS):
        p_ids, t_ids = _ids(tok, p, t)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p_ids + t_ids])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        # target token j is predicted at position len(prompt) - 1 + j
        want.append(-torch.stack([logp[len(p_ids) - 1 + j, tid] for j, tid in enumerate(t_ids)]).mean())
    got = target_nll(model, tok, PROMPTS, TARGETS)
    torch.testing.assert_close(got.detach(), torch.stack(want).mean(), rtol=1e-5, atol=1e-5)
    # the two objectives differ as soon as the target has more than one token
    assert abs(got.item() - prompt_last_nll(model, tok, PROMPTS, TARGETS).item()) > 1e-3


def test_ft_l_and_ft_m_are_registered_with_their_reference_settings():
    from sage.editing.editor_base import make_editor

    ftl = make_editor("ft-l").hparams
    assert (ftl.layer, ftl.lr, ftl.norm_constraint, ftl.steps) == (0, 5e-4, 5e-4, 25)
    assert make_editor("ft-m").objective is target_nll
    assert make_editor("ft-l").objective is prompt_last_nll
