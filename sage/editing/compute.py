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


class _Stop(Exception):
    """Raised by a capture hook once the needed activation is in hand: later layers never run."""


def _subject_rows(contexts: Sequence[str], requests: Sequence[EditRequest]) -> list[str]:
    """Texts ending at each subject's last token: len(contexts) rows per request, request-major."""
    return [ctx + r.subject for r in requests for ctx in contexts]


def _last_token_activations(model, tokenizer, module, texts: Sequence[str], *, output: bool,
                            rows_per_batch: int = 64):
    """Input (or output) of `module` at each text's last token: [len(texts), dim].

    Texts go in batches and each forward pass stops right after `module`."""
    import torch

    captured: list = []

    def grab(x):
        captured.append(x.detach()[:, -1, :].float())
        raise _Stop

    def pre(_m, args):
        grab(args[0])

    def post(_m, _args, out):
        grab(out[0] if isinstance(out, tuple) else out)

    dev = next(model.parameters()).device
    for s in range(0, len(texts), rows_per_batch):
        enc = tokenizer(list(texts[s:s + rows_per_batch]), return_tensors="pt", padding=True)
        mask = enc.attention_mask.to(dev)  # left padding: the last token is at -1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with hooked(module, **({"post": post} if output else {"pre": pre})), torch.no_grad():
            try:
                model(input_ids=enc.input_ids.to(dev), attention_mask=mask, position_ids=pos)
            except _Stop:
                pass
    return torch.cat(captured)


def subject_keys(model, tokenizer, profile: ModelProfile, layer: int,
                 requests: Sequence[EditRequest], contexts: Sequence[str]):
    """Template-averaged keys (down-projection inputs), one row per request: [N, key_dim]."""
    acts = _last_token_activations(model, tokenizer, profile.mlp_module(model, layer),
                                   _subject_rows(contexts, requests), output=False)
    return acts.reshape(len(requests), len(contexts), -1).mean(1)


def layer_outputs_at_subject(model, tokenizer, profile: ModelProfile, layer: int,
                             requests: Sequence[EditRequest], contexts: Sequence[str]):
    """Residual stream after `layer` at the subject's last token, averaged over contexts: [N, d]."""
    acts = _last_token_activations(model, tokenizer, profile.layer_module(model, layer),
                                   _subject_rows(contexts, requests), output=True)
    return acts.reshape(len(requests), len(contexts), -1).mean(1)


@dataclass(frozen=True)
class DeltaSettings:
    steps: int
    lr: float
    kl_factor: float
    weight_decay: float
    clamp_norm_factor: float
    stop_nll: float = 0.05  # a request whose target NLL falls below this is done
    requests_per_batch: int = 16


@dataclass
class _DeltaState:
    """One request's rows, its vector, optimizer and bookkeeping."""

    req: EditRequest
    prompts: list[str]
    targets: list[str]
    sub_len: list[int]  # tokens up to and including the subject, per row
    delta: Any
    opt: Any
    v0_norm: Any = None
    ref_kl: Any = None
    nll: float = float("inf")
    steps: int = 0
    done: bool = False


def optimize_delta(model, tokenizer, profile: ModelProfile, layer: int, req: EditRequest,
                   contexts: Sequence[str], cfg: DeltaSettings):
    """One request's vector (see `optimize_deltas`)."""
    return optimize_deltas(model, tokenizer, profile, layer, [req], contexts, cfg)[0]


def optimize_deltas(model, tokenizer, profile: ModelProfile, layer: int,
                    requests: Sequence[EditRequest], contexts: Sequence[str], cfg: DeltaSettings,
                    progress: bool = False):
    """Per request, a vector added to the layer's down-projection output at the subject's last
    token that makes `target_new` likely after every context + prompt, with a KL penalty on
    "<subject> is a" and weight decay (ROME's value objective).

    Requests are optimized together in batches (`cfg.requests_per_batch`), each with its own
    vector and Adam state, so the result for a request does not depend on its batch mates; a
    request leaves the batch once its NLL is below `cfg.stop_nll`. Returns [N, d_model]."""
    import torch
    from tqdm.auto import tqdm

    d_model = profile.weight_kv(model, layer).shape[0]
    dev = next(model.parameters()).device
    states = []
    for req in requests:
        prompts = [ctx + req.prompt for ctx in contexts] + [f"{req.subject} is a"]
        sub_len = [len(tokenizer(c + req.subject).input_ids) for c in contexts]
        sub_len.append(len(tokenizer(req.subject).input_ids))
        delta = torch.zeros(d_model, device=dev, requires_grad=True)
        states.append(_DeltaState(req, prompts, [req.target_new] * len(contexts) + [""], sub_len,
                                  delta, torch.optim.Adam([delta], lr=cfg.lr)))
    params = list(model.parameters())
    saved_rg = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    bar = tqdm(total=len(states), desc="value vectors", unit="edit", disable=not progress,
               leave=False)
    try:
        for s in range(0, len(states), cfg.requests_per_batch):
            group = states[s:s + cfg.requests_per_batch]
            for step in range(cfg.steps):
                active = [st for st in group if not st.done]
                if not active:
                    break
                _delta_step(model, tokenizer, profile.mlp_module(model, layer), active, cfg, dev)
                for st in active:
                    if st.done:
                        bar.update(1)
            bar.update(sum(not st.done for st in group))
            for st in group:
                st.done = True
    finally:
        bar.close()
        for p, rg in zip(params, saved_rg):
            p.requires_grad_(rg)
    for st in states:
        log.debug("delta for %s: nll %.3f after %d steps, |delta| %.2f", st.req.uid, st.nll,
                  st.steps, float(st.delta.detach().norm()))
    return torch.stack([st.delta.detach() for st in states])


def _delta_step(model, tokenizer, module, active: list[_DeltaState], cfg: DeltaSettings, dev) -> None:
    """One forward/backward over the active requests' rows and one Adam step for each vector."""
    import torch

    prompts = [p for st in active for p in st.prompts]
    targets = [t for st in active for t in st.targets]
    batch = encode_pairs(tokenizer, prompts, targets, dev)
    owner, cols, kl_rows = [], [], []
    row = 0
    for j, st in enumerate(active):
        for n_sub in st.sub_len:
            n_row = int(batch.attention_mask[row].sum())
            cols.append(batch.input_ids.shape[1] - n_row + n_sub - 1)
            owner.append(j)
            row += 1
        kl_rows.append(row - 1)
    rows_t = torch.arange(len(owner), device=dev)
    cols_t = torch.tensor(cols, device=dev)
    owner_t = torch.tensor(owner, device=dev)
    deltas = torch.stack([st.delta for st in active])
    v0: dict[str, Any] = {}

    def post(_m, _args, out):
        v0["v"] = out[rows_t, cols_t].detach().float()
        out = out.clone()
        out[rows_t, cols_t] = out[rows_t, cols_t] + deltas[owner_t].to(out.dtype)
        return out

    for st in active:
        st.opt.zero_grad()
    with hooked(module, post=post):
        logits, spans, kl_logits = target_logits(model, batch, [(r, batch.prompt_last[r]) for r in kl_rows])
    lps = target_logprobs(logits, spans, batch)
    kl_logp = torch.log_softmax(kl_logits, -1)
    total = 0.0
    for j, st in enumerate(active):
        mine = [i for i, o in enumerate(owner) if o == j]
        nll = -torch.stack([lps[i].mean() for i in mine[:-1]]).mean()
        if st.ref_kl is None:
            st.ref_kl = kl_logp[j].detach()
            st.v0_norm = v0["v"][mine[:-1]].norm(dim=-1).mean()
        kl = torch.nn.functional.kl_div(kl_logp[j], st.ref_kl, log_target=True, reduction="sum")
        wd = cfg.weight_decay * st.delta.norm() / st.v0_norm ** 2  # as in ROME
        st.nll = nll.item()
        st.steps += 1
        if st.nll < cfg.stop_nll:
            st.done = True  # this vector is final; its loss is left out of the backward pass
            continue
        total = total + nll + cfg.kl_factor * kl + wd
    if not torch.is_tensor(total):
        return
    total.backward()
    with torch.no_grad():
        for st in active:
            if st.done:
                continue
            st.opt.step()
            max_norm = cfg.clamp_norm_factor * st.v0_norm
            if st.delta.norm() > max_norm:
                st.delta.mul_(max_norm / st.delta.norm())


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
