"""Key second moments: computed from a local corpus, cached on disk by model/layer/corpus/count."""
from __future__ import annotations

import pytest

from sage.editing.dataset import load_countermoral
from sage.editing.profiles import profile_for
from sage.errors import SageInputError

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def _corpus(countermoral_dir) -> str:
    texts = []
    for fw in ("care_ethics", "deontology"):
        for r in load_countermoral(countermoral_dir, fw, "specific"):
            texts += [r.prompt, *r.action_paraphrases, *r.relation_paraphrases, *r.neighbourhood]
    return "\n".join(texts)


def test_covariance_is_cached_on_disk(bundled_lm, countermoral_dir, tmp_path, monkeypatch):
    import torch

    from sage.editing import key_statistics as stats

    monkeypatch.setenv("SAGE_CACHE_DIR", str(tmp_path))
    model, tok = bundled_lm.model, bundled_lm.tokenizer
    profile = profile_for(model)
    corpus = _corpus(countermoral_dir)
    key_dim = profile.weight_kv(model, 0).shape[1]
    n = 10 * key_dim
    with pytest.raises(SageInputError, match="at least 10x"):
        stats.second_moments(model, tok, profile, [0], corpus, n - 1)
    first = stats.second_moments(model, tok, profile, [0, 1], corpus, n)
    files = sorted((tmp_path / "stats").rglob("*.pt"))
    assert [f.name.split("-")[0] for f in files] == ["layer0", "layer1"]
    assert all(f"-n{n}.pt" in f.name for f in files)
    C = first[1]
    assert C.shape == (key_dim, key_dim) and torch.allclose(C, C.T, atol=1e-5)
    assert torch.linalg.eigvalsh(C.double()).min() > -1e-6  # positive semidefinite

    forwards = []
    hook = model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        again = stats.second_moments(model, tok, profile, [0, 1], corpus, n)
    finally:
        hook.remove()
    assert forwards == []  # served from disk, no model pass
    assert torch.equal(again[1], first[1])
    # another corpus or sample count is another cache entry
    stats.second_moments(model, tok, profile, [0], corpus + "\nmore text", n)
    assert len(list((tmp_path / "stats").rglob("*.pt"))) == 3


def test_alphaedit_refuses_identity_and_rome_warns(caplog):
    from sage.editing.editor_base import make_editor

    with pytest.raises(SageInputError, match="AlphaEdit needs key statistics"):
        make_editor("alphaedit", {"covariance": "identity"})
    with caplog.at_level("WARNING"):
        make_editor("rome", {"covariance": "identity"})
    assert any("identity covariance" in r.message for r in caplog.records)
