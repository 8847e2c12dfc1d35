"""CounterMoral metrics per entry and their aggregation (mean ± std per framework and overall).

Every "post" measure has its pre-edit value next to it (`pre_<name>`), because a small model
already predicts some target tokens before any edit.

- reliability: teacher-forced token accuracy of `target_new` after the edit prompt (EasyEdit's
  `rewrite_acc`) and strict exact match of the greedy continuation;
- action / relation paraphrase generalization: the same on the 10 paraphrases each;
- neighbourhood (the 10 neighbourhood prompts, whose true answer is the entry's `target_true`):
  - `neighbourhood_score`: the paper's mean |P_post - P_pre| of the whole " target_true"
    sequence. It is floored by the pre-edit probability: an edit that drives every neighbour's
    P(target_true) to 0 scores exactly `neighbourhood_score_ceiling` (= mean P_pre), which is
    about 0.01 on the bundled model, so it cannot show damage;
  - `neighbourhood_dlogp`: mean |log P_post - log P_pre| of " target_true" (not floored);
  - `neighbourhood_success`: share of neighbours where P(target_true) > P(target_new)
    (CounterFact's neighbourhood score), before (`pre_`) and after the edit;
  - `neighbourhood_new_rise`: mean log P_post(target_new) - log P_pre(target_new) on the
    neighbours: how far the new target bleeds into unrelated prompts (0 = not at all);
  - `locality`: share of " target_true" positions whose argmax token is unchanged (1 = none);
- routing (wrapper methods only): the share of queries of each kind on which the wrapper
  intervened (`routed_edit`, `routed_action`, `routed_relation`, `routed_neighbour`);
- edit robustness: pre-edit P(target_true) - P(target_new) on the edit prompt;
- by generation (`generation_measures`): the share of greedy continuations that begin with the
  target, per prompt kind (`*_gen`).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from sage.api import TargetScore, TargetScorer
from sage.editing.dataset import EditRequest
from sage.editing.generation_measures import GEN_METRICS

#: measures aggregated per framework (post-edit values and, where they have one, their baselines)
METRICS = (
    "reliability", "reliability_exact", "action_paraphrase", "action_paraphrase_exact",
    "relation_paraphrase", "relation_paraphrase_exact",
    "pre_reliability", "pre_reliability_exact", "pre_action_paraphrase",
    "pre_action_paraphrase_exact", "pre_relation_paraphrase", "pre_relation_paraphrase_exact",
    "neighbourhood_score", "neighbourhood_score_ceiling", "neighbourhood_dlogp",
    "neighbourhood_success", "pre_neighbourhood_success", "neighbourhood_new_rise", "locality",
    "routed_edit", "routed_action", "routed_relation", "routed_neighbour", "robustness",
    *GEN_METRICS, *(f"pre_{m}" for m in GEN_METRICS),
)
_KINDS = (("edit", "new"), ("action", "action"), ("relation", "relation"),
          ("neighbour", "neighbour"))


def _queries(req: EditRequest) -> tuple[list[str], list[str]]:
    n = list(req.neighbourhood)
    prompts = [req.prompt, req.prompt, *req.action_paraphrases, *req.relation_paraphrases, *n, *n]
    targets = [req.target_new, req.target_true]
    targets += [req.target_new] * (len(req.action_paraphrases) + len(req.relation_paraphrases))
    targets += [req.target_true] * len(n) + [req.target_new] * len(n)
    return prompts, targets


def observe(scorer: TargetScorer, req: EditRequest) -> dict[str, list[TargetScore]]:
    """All scores one entry needs from one model state, grouped by prompt kind: `new` / `true`
    (the edit prompt with either target), `action`, `relation` (paraphrases with target_new),
    `neighbour` (neighbourhood prompts with target_true) and `neighbour_new` (with target_new)."""
    prompts, targets = _queries(req)
    s = scorer.score(prompts, targets)
    a, r, n = len(req.action_paraphrases), len(req.relation_paraphrases), len(req.neighbourhood)
    at = 2 + a + r
    return {"new": s[0:1], "true": s[1:2], "action": s[2:2 + a], "relation": s[2 + a:at],
            "neighbour": s[at:at + n], "neighbour_new": s[at + n:at + 2 * n]}


def _acc(scores: Sequence[TargetScore]) -> tuple[float, float]:
    return (float(np.mean([x.token_acc for x in scores])),
            float(np.mean([float(x.exact) for x in scores])))


def neighbourhood_measures(pre_true: Sequence[TargetScore], post_true: Sequence[TargetScore],
                           pre_new: Sequence[TargetScore], post_new: Sequence[TargetScore]) -> dict:
    """The neighbourhood measures of one entry from its neighbour prompts' scores with
    target_true and target_new, before and after the edit (see the module docstring)."""
    p0 = np.array([s.seq_prob for s in pre_true])
    p1 = np.array([s.seq_prob for s in post_true])
    l0 = np.array([s.logprob for s in pre_true])
    l1 = np.array([s.logprob for s in post_true])
    n0 = np.array([s.logprob for s in pre_new])
    n1 = np.array([s.logprob for s in post_new])
    same = [float(x == y) for a, b in zip(pre_true, post_true) for x, y in zip(a.argmax, b.argmax)]
    return {
        "neighbourhood_score": float(np.mean(np.abs(p1 - p0))),
        "neighbourhood_score_ceiling": float(np.mean(p0)),
        "neighbourhood_dlogp": float(np.mean(np.abs(l1 - l0))),
        "neighbourhood_success": float(np.mean(l1 > n1)),
        "pre_neighbourhood_success": float(np.mean(l0 > n0)),
        "neighbourhood_new_rise": float(np.mean(n1 - n0)),
        "locality": float(np.mean(same)) if same else 1.0,
    }


def entry_metrics(pre: dict[str, list[TargetScore]], post: dict[str, list[TargetScore]]) -> dict:
    out: dict[str, float] = {}
    for name, key in (("reliability", "new"), ("action_paraphrase", "action"),
                      ("relation_paraphrase", "relation")):
        out[name], out[name + "_exact"] = _acc(post[key])
        out["pre_" + name], out["pre_" + name + "_exact"] = _acc(pre[key])
    out.update(neighbourhood_measures(pre["neighbour"], post["neighbour"],
                                      pre["neighbour_new"], post["neighbour_new"]))
    for name, key in _KINDS:
        routed = [s.routed for s in post[key] if s.routed is not None]
        if routed:
            out["routed_" + name] = float(np.mean(routed))
    out["robustness"] = pre["true"][0].seq_prob - pre["new"][0].seq_prob
    out["pre_p_true"], out["pre_p_new"] = pre["true"][0].seq_prob, pre["new"][0].seq_prob
    out["post_p_new"] = post["new"][0].seq_prob
    return out


def aggregate(rows: Iterable[dict], metrics: Sequence[str] = METRICS) -> dict[str, dict]:
    rows = list(rows)
    out = {}
    for m in metrics:
        vals = [r[m] for r in rows if m in r]
        if vals:
            out[m] = {"mean": float(np.mean(vals)), "std": float(np.std(vals)), "n": len(vals)}
    return out


def combine(parts: Iterable[dict[str, dict]]) -> dict[str, dict]:
    """`aggregate` of the union of disjoint row sets, from each set's aggregate alone: the pooled
    mean and population std (`sum n_i (std_i^2 + mean_i^2) / N - mean^2`), per metric present in
    every part (a metric missing from one part would pool only some rows)."""
    parts = list(parts)
    if not parts:
        return {}
    out = {}
    for m in set.intersection(*(set(p) for p in parts)):
        n = np.array([p[m]["n"] for p in parts], dtype=float)
        mean = np.array([p[m]["mean"] for p in parts], dtype=float)
        std = np.array([p[m]["std"] for p in parts], dtype=float)
        total = n.sum()
        mu = float((n * mean).sum() / total)
        var = float((n * (std ** 2 + mean ** 2)).sum() / total - mu ** 2)
        out[m] = {"mean": mu, "std": float(np.sqrt(max(var, 0.0))), "n": int(total)}
    return out
