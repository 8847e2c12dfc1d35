"""ROME and MEMIT on the bundled model in bfloat16 (CPU): the key statistics, solves and value
optimization stay in float32/float64 and the update is written back in the weights' dtype, so the
edits reach the float32 model's reliability, and restore is bit-exact."""
from __future__ import annotations

import pytest

from sage.editing.editor_base import EditContext, make_editor
from sage.editing.dataset import load_countermoral
from sage.editing.handles import state_hashes
from sage.editing.runner import evaluate

pytestmark = [pytest.mark.slow]

HP = {
    "rome": {"v_steps": 12, "n_context": 2, "clamp_norm_factor": 10.0, "stats_tokens": 15360},
    "memit": {"v_steps": 12, "n_context": 2, "layers": [3, 4], "clamp_norm_factor": 10.0,
              "stats_tokens": 15360},
}


@pytest.fixture(scope="module")
def bf16_lm():
    from sage.models.causal_lm import load_causal_lm

    lm = load_causal_lm("smollm2-135m", dtype="bfloat16")
    import torch

    assert next(lm.model.parameters()).dtype == torch.bfloat16
    return lm


@pytest.fixture(scope="module")
def corpus_file(countermoral_dir, tmp_path_factory):
    texts = [f"{r.prompt} {r.target_true}. " + " ".join((*r.action_paraphrases, *r.neighbourhood))
             for fw in ("care_ethics", "deontology", "utilitarianism", "virtue_ethics")
             for r in load_countermoral(countermoral_dir, fw, "specific")]
    path = tmp_path_factory.mktemp("corpus") / "countermoral.txt"
    path.write_text("\n".join(texts))
    return str(path)


@pytest.mark.parametrize("method", ["rome", "memit"])
def test_bfloat16_edit_matches_float32_reliability_and_restores_exactly(
        method, bf16_lm, bundled_lm, countermoral_dir, corpus_file):
    import torch

    reqs = load_countermoral(countermoral_dir, "deontology", "broad", 2)
    rel = {}
    for name, lm in (("float32", bundled_lm), ("bfloat16", bf16_lm)):
        before = state_hashes(lm.model)
        editor = make_editor(method, HP[method], EditContext(pool=reqs, corpus=corpus_file))
        rows = evaluate(editor, lm, reqs, batch=False)
        assert state_hashes(lm.model) == before  # restore is bit-exact in either dtype
        assert next(lm.model.parameters()).dtype == getattr(torch, name)  # written back in the weights' dtype
        rel[name] = [r["reliability"] for r in rows]
        assert all(r["reliability"] > r["pre_reliability"] for r in rows), (name, rows)
    # the same entries reach the same token accuracy (a bfloat16 rounding may flip one token)
    for r32, r16 in zip(rel["float32"], rel["bfloat16"]):
        assert abs(r32 - r16) <= 0.25, rel
