"""AlphaEdit's null-space property on a tiny random Llama: with a full-rank key second moment
whose preserved keys span part of the key space, the edit leaves their outputs unchanged to
1e-4 relative, while MEMIT's update does not; the null space's dimension and the variance
share it holds are reported."""
from __future__ import annotations

import pytest
import torch

from sage.editing import solvers
from sage.editing.editor_base import make_editor
from sage.editing.dataset import EditRequest
from sage.editing.handles import state_hashes
from sage.editing.profiles import profile_for
from sage.models.causal_lm import LoadedModel

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

REQ = EditRequest(uid="u1", framework="deontology", subject="Telling the truth",
                  relation="is recognized as", target_true="integrity", target_new="cowardice",
                  action_paraphrases=("Being honest is recognized as",),
                  relation_paraphrases=("Telling the truth is seen as",),
                  neighbourhood=("Helping someone in need is recognized as",))
LAYERS = (0, 1)


@pytest.fixture(scope="module")
def tiny(bundled_lm):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = bundled_lm.tokenizer
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, architectures=["LlamaForCausalLM"])
    model = LlamaForCausalLM(cfg).eval()
    return LoadedModel(name="tiny-llama", path=None, model=model, tokenizer=tok)


def _preserved_keys(lm, layer: int, basis):
    """Keys of random text at one layer, restricted to the span of `basis` (the preserved
    knowledge lives in 48 of the 64 key dimensions)."""
    profile = profile_for(lm.model)
    got = []
    hook = profile.mlp_module(lm.model, layer).register_forward_pre_hook(
        lambda _m, a: got.append(a[0].reshape(-1, a[0].shape[-1]).double()))
    try:
        with torch.no_grad():
            lm.model(input_ids=torch.randint(100, 5000, (8, 64)))
    finally:
        hook.remove()
    k = got[0]
    return k @ basis @ basis.T  # [n, 64]


def _edit(lm, method: str, covs: dict, threshold: float = 0.0):
    # the random model's MLP outputs are tiny (init std 0.02): no norm clamp, no weight decay
    hp = {"layers": list(LAYERS), "v_steps": 5, "v_lr": 0.5, "n_context": 0,
          "clamp_norm_factor": 1e6, "weight_decay": 0.0}
    editor = make_editor(method, {**hp, "nullspace_threshold": threshold} if method == "alphaedit" else hp)
    for layer, cov in covs.items():  # the key statistics, as if computed from a corpus
        editor._cov[(layer, 0)] = cov.float()
    profile = profile_for(lm.model)
    before = {layer: profile.weight_kv(lm.model, layer).detach().double().clone() for layer in LAYERS}
    handle = editor.apply(lm, [REQ])
    dW = {layer: profile.weight_kv(lm.model, layer).detach().double() - before[layer] for layer in LAYERS}
    handle.restore()
    return editor, dW, before


def test_alphaedit_update_leaves_preserved_keys_unchanged(tiny):
    torch.manual_seed(1)
    basis, _ = torch.linalg.qr(torch.randn(64, 48, dtype=torch.float64))
    K0 = {layer: _preserved_keys(tiny, layer, basis) for layer in LAYERS}
    # full rank: the preserved keys' second moment plus an isotropic part 1e-6 of its smallest
    # eigenvalue (a random model's keys are small: the scale comes from them)
    moments = {layer: k.T @ k / len(k) for layer, k in K0.items()}
    floor = min(float(torch.linalg.eigvalsh(m)[-48]) for m in moments.values())
    covs = {layer: m + 1e-6 * floor * torch.eye(64, dtype=torch.float64) for layer, m in moments.items()}
    assert all(torch.linalg.matrix_rank(c, hermitian=True) == 64 for c in covs.values())
    hashes = state_hashes(tiny.model)

    editor, dW, W = _edit(tiny, "alphaedit", covs, threshold=1e-3 * floor)
    assert state_hashes(tiny.model) == hashes
    diag = editor.diagnostics()["null_space"]
    alpha_rel = 0.0
    for layer in LAYERS:
        assert dW[layer].norm() > 1e-3 * W[layer].norm()  # the edit wrote something
        change = (K0[layer] @ dW[layer].T).norm(dim=-1)
        out = (K0[layer] @ W[layer].T).norm(dim=-1)
        alpha_rel = max(alpha_rel, float((change / out).max()))
        assert alpha_rel < 1e-4, alpha_rel
        ns = diag[str(layer)]
        assert ns["null_dim"] == 16 and ns["variance_share"] < 1e-5

    _, dW_memit, _ = _edit(tiny, "memit", covs)
    rel = max(float(((K0[layer] @ dW_memit[layer].T).norm(dim=-1)
                     / (K0[layer] @ W[layer].T).norm(dim=-1)).max()) for layer in LAYERS)
    assert rel > 100 * alpha_rel  # without the projection the preserved outputs move


def test_null_space_threshold_is_absolute_and_its_share_is_reported():
    evals = torch.tensor([10.0, 1.0, 0.1, 0.01, 0.001], dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    C = Q @ torch.diag(evals) @ Q.T
    ns = solvers.null_space(C, 0.05)
    assert ns.dim == 2
    assert ns.variance_share == pytest.approx(0.011 / evals.sum().item())
    torch.testing.assert_close(ns.projector, Q[:, 3:] @ Q[:, 3:].T)
    assert solvers.null_space(C * 100, 0.05).dim == 0  # absolute: scaling C moves the cut
