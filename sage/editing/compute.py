"""Numerics shared by the locate-then-edit methods (ROME, MEMIT, AlphaEdit), written once.

- `context_templates`: model-generated prefixes the key is averaged over;
- `subject_keys`: input of the MLP down-projection at the subject's last token, averaged over the
  context prefixes (the template-averaged key that R-ROME uses in the update);
- `optimize_delta`: the value-side optimization (target NLL + KL on "<subject> is a" + weight decay,
  norm clamp) of a vector added to the down-projection output at the subject's last token;
- solvers: rank-one (ROME), least squares over several keys (MEMIT), null-space projected (AlphaEdit).
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Sequence

from sage.editing.dataset import EditRequest
from sage.editing.profiles import ModelProfile
from sage.editing.scorer import encode_pairs, target_logits, target_logprobs

log = logging.getLogger(__name__)
_TEMPLATE_CACHE: dict[tuple, list[str]] = {}
_PREFIX_STARTS = ("The", "Therefore", "Because", "I", "You", "It is", "However", "In the end",
                  "When", "We")


@contextlib.contextmanager
def hooked(module: Any, *, pre=None, post=None):
    handles = []
    if pre is not None:
        handles.append(module.register_forward_pre_hook(pre))
    if post is not None:
        handles.append(module.register_forward_hook(post))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def context_templates(model: Any, tokenizer: Any, n: int, length: int, seed: int = 0) -> list[str]:
    """`["", gen_1 + ". ", ...]`: prefixes sampled from the model itself (cached per process)."""
    import torch

    key = (id(model), n, length, seed)
    if key in _TEMPLATE_CACHE:
        return _TEMPLATE_CACHE[key]
    out = [""]
    if n > 0:
        starts = [_PREFIX_STARTS[i % len(_PREFIX_STARTS)] for i in range(n)]
        enc = tokenizer(starts, return_tensors="pt", padding=True).to(next(model.parameters()).device)
        torch.manual_seed(seed)
        with torch.no_grad():
            gen = model.generate(**enc, do_sample=True, top_k=5, max_new_tokens=length,
                                 pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(gen, skip_special_tokens=True)
        out += [t.replace("{", " ").replace("}", " ").strip() + ". " for t in texts]
    _TEMPLATE_CACHE[key] = out
    return out


def _subject_rows(tokenizer, contexts: Sequence[str], req: EditRequest):
    """Texts ending at the subject's last token, one per context."""
    return [ctx + req.subject for ctx in contexts]


def _last_token_inputs(model, tokenizer, module, texts: Sequence[str]):
    """Input of `module` at each text's last token: [len(texts), key_dim]."""
    import torch

    captured = {}

    def pre(_m, args):
        captured["x"] = args[0].detach()

    enc = tokenizer(list(texts), return_tensors="pt", padding=True)  # left padding: last = -1
    dev = next(model.parameters()).device
    mask = enc.attention_mask.to(dev)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with hooked(module, pre=pre), torch.no_grad():
        model(input_ids=enc.input_ids.to(dev), attention_mask=mask, position_ids=pos)
    return captured["x"][:, -1, :].float()


def subject_keys(model, tokenizer, profile: ModelProfile, layer: int,
                 requests: Sequence[EditRequest], contexts: Sequence[str]):
    """Template-averaged keys, one row per request: [N, key_dim]."""
    import torch

    module = profile.mlp_module(model, layer)
    rows = [_last_token_inputs(model, tokenizer, module, _subject_rows(tokenizer, contexts, r)).mean(0)
            for r in requests]
    return torch.stack(rows)


def layer_outputs_at_subject(model, tokenizer, profile: ModelProfile, layer: int,
                             requests: Sequence[EditRequest], contexts: Sequence[str]):
    """Residual stream after `layer` at the subject's last token, averaged over contexts: [N, d]."""
    import torch

    captured = {}

    def post(_m, _args, out):
        captured["h"] = (out[0] if isinstance(out, tuple) else out).detach()

    module = profile.layer_module(model, layer)
    rows = []
    for r in requests:
        enc = tokenizer(_subject_rows(tokenizer, contexts, r), return_tensors="pt", padding=True)
        dev = next(model.parameters()).device
        mask = enc.attention_mask.to(dev)
        with hooked(module, post=post), torch.no_grad():
            model(input_ids=enc.input_ids.to(dev), attention_mask=mask,
                  position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
        rows.append(captured["h"][:, -1, :].float().mean(0))
    return torch.stack(rows)


@dataclass(frozen=True)
class DeltaSettings:
    steps: int
    lr: float
    kl_factor: float
    weight_decay: float
    clamp_norm_factor: float


def optimize_delta(model, tokenizer, profile: ModelProfile, layer: int, req: EditRequest,
                   contexts: Sequence[str], cfg: DeltaSettings):
    """Vector added to the layer's down-projection output at the subject's last token that makes
    `target_new` likely after every context + prompt, with a KL penalty on "<subject> is a"."""
    import torch

    module = profile.mlp_module(model, layer)
    dev = next(model.parameters()).device
    rewrite = [ctx + req.prompt for ctx in contexts]
    kl_prompts = [f"{req.subject} is a"]
    batch = encode_pairs(tokenizer, rewrite + kl_prompts, [req.target_new] * len(rewrite) + [""], dev)
    # subject's last token in each padded row
    sub_pos = []
    for i, text in enumerate(rewrite + kl_prompts):
        n_sub = len(tokenizer((contexts[i] if i < len(rewrite) else "") + req.subject).input_ids)
        n_row = int(batch.attention_mask[i].sum())
        sub_pos.append(batch.input_ids.shape[1] - n_row + n_sub - 1)
    rows = torch.arange(len(sub_pos), device=dev)
    cols = torch.tensor(sub_pos, device=dev)
    kl_row = len(rewrite)
    kl_last = batch.prompt_last[kl_row]
    d_model = profile.weight_kv(model, layer).shape[0]
    delta = torch.zeros(d_model, device=dev, requires_grad=True)
    state: dict[str, Any] = {}

    def post(_m, _args, out):
        if "v0" not in state:
            state["v0"] = out[rows, cols].detach().float().clone()
        out = out.clone()
        out[rows, cols] = out[rows, cols] + delta.to(out.dtype)
        return out

    opt = torch.optim.Adam([delta], lr=cfg.lr)
    params = [p for p in model.parameters()]
    saved_rg = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    ref_kl = None
    try:
        with hooked(module, post=post):
            for step in range(cfg.steps):
                opt.zero_grad()
                logits, spans, kl_logits = target_logits(model, batch, [(kl_row, kl_last)])
                lps = target_logprobs(logits, spans, batch)[:kl_row]
                nll = -torch.stack([lp.mean() for lp in lps]).mean()
                kl_logp = torch.log_softmax(kl_logits[0], -1)
                if ref_kl is None:
                    ref_kl = kl_logp.detach()
                kl = torch.nn.functional.kl_div(kl_logp, ref_kl, log_target=True, reduction="sum")
                v0_norm = state["v0"].norm(dim=-1).mean()
                wd = cfg.weight_decay * delta.norm() / v0_norm ** 2  # as in ROME
                loss = nll + cfg.kl_factor * kl + wd
                log.debug("step %d: nll %.3f kl %.4f wd %.3f |delta| %.2f |v0| %.2f", step, nll.item(),
                          kl.item(), wd.item(), delta.norm().item(), v0_norm.item())
                if nll.item() < 0.05:
                    break
                loss.backward()
                opt.step()
                with torch.no_grad():
                    max_norm = cfg.clamp_norm_factor * v0_norm
                    if delta.norm() > max_norm:
                        delta.mul_(max_norm / delta.norm())
        log.debug("delta for %s: nll %.3f after %d steps", req.uid, nll.item(), step + 1)
    finally:
        for p, rg in zip(params, saved_rg):
            p.requires_grad_(rg)
    return delta.detach()


# --------------------------------------------------------------------------- solvers
def rank_one_update(W, k, delta_v, cov=None):
    """ROME: dW = delta_v (C^-1 k)^T / (k^T C^-1 k), so (W + dW) k = W k + delta_v.

    `W` is [value_dim, key_dim]; `k` the template-averaged key (R-ROME); `cov` None = identity."""
    import torch

    k = k.double()
    left = k if cov is None else torch.linalg.solve(cov.double(), k)
    left = left / (k @ left)
    return torch.outer(delta_v.double(), left)


def memit_update(K, R, cov, cov_weight: float):
    """MEMIT: dW = R K^T (lambda C + K K^T)^-1 with K [key_dim, N] and R [value_dim, N]."""
    import torch

    K, R = K.double(), R.double()
    A = cov_weight * cov.double() + K @ K.T
    return torch.linalg.solve(A, K @ R.T).T


def null_space_projector(cov, rel_threshold: float):
    """Projector onto the eigenvectors of C with eigenvalue below rel_threshold * max eigenvalue."""
    import torch

    evals, evecs = torch.linalg.eigh(cov.double())
    keep = evals < rel_threshold * evals.max()
    U = evecs[:, keep]
    return U @ U.T, int(keep.sum())


def alphaedit_update(K, R, P, l2: float):
    """AlphaEdit: dW = R K^T P (K K^T P + l2 I)^-1, i.e. an update whose rows lie in the null
    space of the preserved keys (dW K0 ~ 0)."""
    import torch

    K, R, P = K.double(), R.double(), P.double()
    eye = torch.eye(P.shape[0], dtype=P.dtype, device=P.device)
    return torch.linalg.solve(P @ (K @ K.T) + l2 * eye, P @ K @ R.T).T
