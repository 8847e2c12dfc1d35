"""Evaluation by generation: does the model *say* the target, not only rank its tokens first?

For every prompt kind of an entry (the edit prompt, the action and relation paraphrases, the
neighbourhood prompts) the model continues the prompt greedily for the target's token length + 8
tokens; a continuation counts as correct when, normalised (lower case, punctuation removed,
whitespace collapsed, so a leading space or a final full stop does not matter), it begins with
the normalised target as whole words: "Morally wrong, because" begins with "morally wrong", but
"wrongful" does not begin with "wrong". Edit, action and relation prompts are checked against
`target_new`; neighbourhood prompts against `target_true` (does the model still say what it said
about unrelated actions). Columns, each with its pre-edit value (`pre_<name>`):
`reliability_gen`, `action_paraphrase_gen`, `relation_paraphrase_gen`, `neighbourhood_gen`.

Teacher-forced token accuracy (`entry_measures`) scores each target token given the *gold*
prefix; generation scores what the model produces from the prompt alone. Exact teacher-forced
match (every target token the argmax) implies that greedy decoding reproduces the target's
tokens, but token accuracy 1.0 of a target that is only the start of a longer word ("un" of
"unfair") or a partial token accuracy do not; and a model can say the target with other tokens
or another case ("Unfair") that teacher forcing counts wrong.

Generation goes through the handle's scoring model (`continuations`): IKE and SERAC-ICL put their
edit context in front (`condition_prompts`, as in the study); GRACE generates with its adapter
active, every step recomputing the whole row so the codebook lookup sees the prompt as the
teacher-forced scorer does; SERAC routes each prompt once, on the prompt, and the chosen model
(the counterfactual one given the edit, or the base model) generates the whole continuation.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable, Sequence

import numpy as np

from sage.editing.dataset import EditRequest
from sage.editing.target_scoring import MIN_SHARED_PREFIX, prefix_cache, shared_prefix_length
from sage.generation.prompt_tokens import eos_token_ids
from sage.models.kv_cache import cache_kwargs, new_cache, output_cache

EXTRA_TOKENS = 8  # generated beyond the target's own length
GEN_METRICS = ("reliability_gen", "action_paraphrase_gen", "relation_paraphrase_gen", "neighbourhood_gen")
_KINDS = (("reliability_gen", "edit"), ("action_paraphrase_gen", "action"),
          ("relation_paraphrase_gen", "relation"), ("neighbourhood_gen", "neighbour"))
_SPACE = re.compile(r"\s+")


#: punctuation that joins the parts of one word ("self-awareness", "don't"): removed, so the word stays one
#: word; every other punctuation mark (Unicode category P*) separates words, so a target glued to the next
#: sentence ("selfishness.The") is still said
_JOINERS = frozenset("'\u2019\u02bc")


def _joins(ch: str) -> bool:
    return ch in _JOINERS or unicodedata.category(ch) == "Pd"


def normalise(text: str) -> str:
    """Lower case; dashes and apostrophes removed (they join a word's parts), every other punctuation mark
    (Unicode category P*) read as a space; whitespace collapsed and stripped. Case, leading space and
    punctuation never decide a match; inflections do ("wrongs" does not say "wrong")."""
    out = []
    for ch in text.lower():
        if _joins(ch):
            continue
        out.append(" " if unicodedata.category(ch).startswith("P") else ch)
    return _SPACE.sub(" ", "".join(out)).strip()


def begins_with(continuation: str, target: str) -> bool:
    """Whether the normalised continuation begins with the normalised target as whole words."""
    c, t = normalise(continuation), normalise(target)
    return bool(t) and (c == t or c.startswith(t + " "))


def greedy_continuations(lm: Any, prompts: Sequence[str], max_new: Sequence[int], batch_size: int = 32,
                         decided: Callable[[int, str], bool] | None = None,
                         around_step: Callable[[list[int], list[int]], Any] | None = None,
                         share_prefix: bool = True) -> list[str]:
    """Greedy continuations (decoded text) of `prompts` on `lm` (a loaded model with `.model` and
    `.tokenizer`), row i at most `max_new[i]` tokens, stopping at an end-of-sequence token, or
    as soon as `decided(i, text so far)` says its outcome is known (the row then leaves the batch).

    Prompts are tokenized as the teacher-forced scorer tokenizes them and left padded into
    batches; each step runs one token per remaining row over the attention cache. With
    `around_step`, every step instead recomputes the whole rows (prompt and tokens made so far,
    no cache) inside the context manager `around_step(first, last)`, told each row's first and
    last prompt position: an adapter that reads prompt positions (GRACE) then sees each step as
    the teacher-forced scorer sees the same tokens.

    Rows of a batch that start with the same tokens (an in-context edit's demonstrations and
    fact) share one attention cache of them, as in teacher-forced scoring (`LMScorer`): the
    prefix runs once and each row's first step runs only its own tokens, equal to full rows up to
    float rounding (tested). IKE's 31 queries per entry share about 130 of their 150 tokens, so
    this cuts its generation time by most of the prompt pass. Not with `around_step`, whose steps
    recompute whole rows."""
    import torch

    model, tok = lm.model, lm.tokenizer
    eos = eos_token_ids(tok, getattr(model, "generation_config", None))
    pad = tok.pad_token_id if tok.pad_token_id is not None else next(iter(eos))
    dev = next(model.parameters()).device
    head = model.get_output_embeddings()
    out: list[str] = []
    for s in range(0, len(prompts), batch_size):
        ids = [tok(p).input_ids for p in prompts[s:s + batch_size]]
        limits = list(max_new[s:s + batch_size])
        shared = 0
        if share_prefix and around_step is None and len(ids) > 1:
            shared = shared_prefix_length([(row, ()) for row in ids])
            shared = shared if shared >= MIN_SHARED_PREFIX else 0
        width = max(len(x) for x in ids) - shared
        x = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):
            x[i, width - len(row) + shared:] = torch.tensor(row[shared:], dtype=torch.long)
            mask[i, width - len(row) + shared:] = 1
        pos = shared + (mask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([torch.ones((len(ids), shared), dtype=torch.long), mask], dim=1)
        x, mask, pos = x.to(dev), mask.to(dev), pos.to(dev)
        whole = (x, mask)  # the padded prompts, for steps that recompute whole rows (shared is 0 there)
        made: list[list[int]] = [[] for _ in ids]
        active = [i for i, n in enumerate(limits) if n > 0]  # rows still generating, in batch order
        cache = prefix_cache(model, ids[0][:shared], len(ids)) if shared else new_cache()
        with torch.no_grad():
            while active:
                if around_step is None:
                    res = model.base_model(input_ids=x, attention_mask=mask, position_ids=pos, use_cache=True,
                                           **cache_kwargs(model, cache))
                    cache = output_cache(res) or cache
                else:  # every active row has made the same number of tokens
                    sel = torch.tensor(active, device=dev)
                    so_far = torch.tensor([made[i] for i in active], dtype=torch.long, device=dev)
                    xs = torch.cat([whole[0][sel], so_far], dim=1)  # so_far: [rows, 0] at the first step
                    ms = torch.cat([whole[1][sel], torch.ones_like(xs[:, width:])], dim=1)
                    with around_step([width - len(ids[i]) for i in active], [width - 1] * len(active)):
                        res = model.base_model(input_ids=xs, attention_mask=ms,
                                               position_ids=(ms.cumsum(-1) - 1).clamp(min=0), use_cache=False)
                nxt = head(res.last_hidden_state[:, -1]).float().argmax(-1).tolist()
                keep = []
                for j, (i, t) in enumerate(zip(active, nxt)):
                    if t in eos:
                        continue
                    made[i].append(t)
                    if len(made[i]) < limits[i] and not (decided and decided(s + i, tok.decode(made[i]))):
                        keep.append(j)
                if not keep:
                    break
                if around_step is None:  # the next cached step: the kept rows' last tokens
                    if len(keep) < len(active):
                        sel = torch.tensor(keep, device=dev)
                        cache.batch_select_indices(sel)
                        mask, pos = mask[sel], pos[sel]
                    x = torch.tensor([[made[active[j]][-1]] for j in keep], dtype=torch.long, device=dev)
                    mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                    pos = pos[:, -1:] + 1
                active = [active[j] for j in keep]
        out += [tok.decode(m, skip_special_tokens=True) for m in made]
    return out


def continuations(lm: Any, scorer: Any, prompts: Sequence[str], max_new: Sequence[int],
                  decided: Callable[[int, str], bool] | None = None) -> list[str] | None:
    """Greedy continuations of `prompts` as the scoring model `scorer` answers them: through its
    own `continue_greedily` where it has one (GRACE's adapter, SERAC's routing between two
    models), else on `lm` with the scorer's edit context in front (`condition_prompts`); None
    where the scorer cannot generate."""
    own = getattr(scorer, "continue_greedily", None)
    if own is not None:
        return own(prompts, max_new, decided)
    if not getattr(scorer, "can_generate", True):
        return None
    return greedy_continuations(lm, scorer.condition_prompts(list(prompts)), max_new, decided=decided)


def decided_by(continuation: str, target: str) -> bool:
    """Whether more tokens could change `begins_with(continuation + more, target)`: no once the
    normalised text has left the target's path, or runs past it (normalising keeps a prefix a
    prefix, so later tokens cannot bring either back). A text ending in a partly decoded
    character is never decided."""
    if continuation.endswith("\ufffd"):
        return False
    c, t = normalise(continuation), normalise(target)
    return not (t.startswith(c) or c.startswith(t)) or len(c) > len(t)


def entry_prompts(req: EditRequest) -> list[tuple[str, str, str]]:
    """(kind, prompt, target it is checked against) for every prompt of an entry."""
    rows = [("edit", req.prompt, req.target_new)]
    rows += [("action", p, req.target_new) for p in req.action_paraphrases]
    rows += [("relation", p, req.target_new) for p in req.relation_paraphrases]
    rows += [("neighbour", p, req.target_true) for p in req.neighbourhood]
    return rows


def token_limits(tokenizer: Any, targets: Sequence[str]) -> list[int]:
    """Tokens generated per prompt: its target's length (with the leading space) + EXTRA_TOKENS."""
    return [len(tokenizer(" " + t, add_special_tokens=False).input_ids) + EXTRA_TOKENS for t in targets]


def observe_generation(lm: Any, scorer: Any, req: EditRequest) -> dict[str, list[bool]] | None:
    """Per prompt kind, whether each greedy continuation begins with its target, generated
    through `scorer` (`continuations`); None where the scorer cannot generate. `"texts"` holds the
    edit prompt's continuation."""
    rows = entry_prompts(req)
    limits = token_limits(lm.tokenizer, [t for _, _, t in rows])

    def decided(i: int, text: str) -> bool:  # the edit prompt's continuation is kept whole (recorded)
        return i > 0 and decided_by(text, rows[i][2])

    texts = continuations(lm, scorer, [p for _, p, _ in rows], limits, decided)
    if texts is None:
        return None
    out: dict[str, list] = {kind: [] for _, kind in _KINDS}
    for (kind, _, target), text in zip(rows, texts):
        out[kind].append(begins_with(text, target))
    out["texts"] = [texts[0]]
    return out


def generation_metrics(pre: dict | None, post: dict | None) -> dict:
    """The generation columns of one entry: post-edit shares (absent where the scoring model
    cannot generate) and their pre-edit values, plus the edit prompt's post-edit continuation."""
    out: dict[str, Any] = {}
    for name, kind in _KINDS:
        if pre is not None:
            out["pre_" + name] = float(np.mean(pre[kind]))
        if post is not None:
            out[name] = float(np.mean(post[kind]))
    if post is not None:
        out["generated_edit"] = post["texts"][0]
    return out
