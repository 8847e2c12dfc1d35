"""Every registered editor on the bundled model: the edit takes, neighbourhood is measured on the
edited model, and restore() gives the original weights bit for bit (tensor hashes).

Few steps and one entry per method keep this under a few minutes on 2 CPU cores.
"""
from __future__ import annotations

import pytest

from sage.editing.editor_base import EditContext, make_editor
from sage.editing.dataset import load_countermoral
from sage.editing.entry_measures import observe
from sage.editing.handles import state_hashes
from sage.editing.runner import evaluate
from sage.editing.target_scoring import LMScorer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


# Small budgets for tests; the defaults (TUNING.md) are for real runs.
FAST = {
    "ft-m": {"steps": 10, "lr": 2e-2, "norm_constraint": 2e-2},
    "ft-l": {"steps": 10, "lr": 2e-2, "norm_constraint": 2e-2, "layer": 4},
    "lora": {"steps": 10, "lr": 2e-2, "layers": [3, 4]},
    # key statistics from 10x the key dimension (the minimum) keep the first run short
    "rome": {"v_steps": 12, "n_context": 2, "clamp_norm_factor": 10.0, "stats_tokens": 15360},
    "memit": {"v_steps": 12, "n_context": 2, "layers": [3, 4], "clamp_norm_factor": 10.0,
              "stats_tokens": 15360},
    "alphaedit": {"v_steps": 12, "n_context": 2, "layers": [3, 4], "clamp_norm_factor": 10.0,
                  "stats_tokens": 15360},
    "ike": {"k": 3},
    "serac": {"cls_epochs": 1, "cls_max_pairs": 300, "cf_steps": 10, "cf_layers": 2},
    "serac-icl": {},
    "grace": {"steps": 10},
}


@pytest.fixture(scope="module")
def pool(countermoral_dir):
    return load_countermoral(countermoral_dir, "deontology", "broad")


@pytest.fixture(scope="module")
def corpus_file(countermoral_dir, tmp_path_factory):
    """A local corpus for key statistics: every prompt of the specific subsets (> 10x key dim)."""
    texts = []
    for fw in ("care_ethics", "deontology", "utilitarianism", "virtue_ethics"):
        for r in load_countermoral(countermoral_dir, fw, "specific"):
            texts += [f"{r.prompt} {r.target_true}.", *r.action_paraphrases, *r.neighbourhood]
    path = tmp_path_factory.mktemp("corpus") / "countermoral.txt"
    path.write_text("\n".join(texts))  # same text every run: the statistics cache is reused
    return str(path)


@pytest.fixture(scope="module")
def held_out(countermoral_dir):
    """SERAC's training entries: other frameworks' (a few, to keep the test short)."""
    return [r for fw in ("care_ethics", "virtue_ethics") for r in load_countermoral(countermoral_dir, fw, "broad", 6)]


@pytest.mark.parametrize("method", sorted(FAST))
def test_edit_takes_and_restores_bit_for_bit(method, bundled_lm, pool, held_out, corpus_file,
                                             tmp_path, monkeypatch):
    if method == "serac":  # its trained parts are cached: keep the test's out of the user cache
        monkeypatch.setenv("SAGE_CACHE_DIR", str(tmp_path))
    from sage.editing.editor_base import EDITORS

    assert method in EDITORS, f"{method} is not registered"  # a missing method must fail, not skip
    before = state_hashes(bundled_lm.model)
    editor = make_editor(method, FAST[method], EditContext(pool=pool, held_out=held_out, corpus=corpus_file))
    req = pool[0]
    [row] = evaluate(editor, bundled_lm, [req], batch=False)
    assert state_hashes(bundled_lm.model) == before
    # the edit takes: the new target becomes clearly more likely and better predicted
    assert row["post_p_new"] > 20 * row["pre_p_new"]
    if method != "ft-l":  # FT-L predicts the target from the last prompt position only, so
        # teacher-forced accuracy of later target tokens is not what it trains
        assert row["reliability"] >= row["pre_reliability"] + 0.19  # e.g. 2 -> 3 of 5 tokens
    assert 0.0 <= row["locality"] <= 1.0 and row["neighbourhood_score"] >= 0.0


@pytest.mark.parametrize("method", ["rome", "ft-m"])
def test_neighbourhood_is_measured_on_the_edited_model(method, bundled_lm, pool, corpus_file):
    req = pool[1]
    base = LMScorer(bundled_lm.model, bundled_lm.tokenizer)
    pre = observe(base, req)
    editor = make_editor(method, FAST[method], EditContext(pool=pool, corpus=corpus_file))
    handle = editor.apply(bundled_lm, [req])
    try:
        during = observe(handle.scoring_model(), req)
    finally:
        handle.restore()
    after = observe(base, req)
    changed = [abs(a.seq_prob - b.seq_prob) for a, b in zip(pre["neighbour"], during["neighbour"])]
    assert max(changed) > 0.0  # scored while edited, not after restoring
    assert [s.seq_prob for s in after["neighbour"]] == [s.seq_prob for s in pre["neighbour"]]


@pytest.mark.parametrize("method", ["rome", "memit", "ft-l"])
def test_same_code_edits_a_gpt2_layout(method, bundled_lm, pool):
    """GPT-2 keeps its MLP in Conv1D ([in, out]); the profile from config.architectures handles it."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from sage.models.causal_lm import LoadedModel

    tok = bundled_lm.tokenizer
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=64, n_head=2, vocab_size=len(tok),
                                      architectures=["GPT2LMHeadModel"])).eval()
    lm = LoadedModel(name="tiny-gpt2", path=None, model=gpt2, tokenizer=tok)
    over = {"rome": {"layer": 1, "v_steps": 3, "n_context": 1, "covariance": "identity"},
            "memit": {"layers": [0, 1], "v_steps": 3, "n_context": 1, "covariance": "identity"},
            "ft-l": {"layer": 1, "steps": 3, "lr": 1e-2, "norm_constraint": 1e-2}}[method]
    before = state_hashes(gpt2)
    handle = make_editor(method, over).apply(lm, [pool[0]])
    changed = state_hashes(gpt2) != before
    handle.restore()
    assert changed and state_hashes(gpt2) == before
