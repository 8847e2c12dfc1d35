"""CounterMoral metrics per entry and their aggregation (mean ± std per framework and overall).

- reliability: teacher-forced token accuracy of `target_new` after the edit prompt (EasyEdit's
  `rewrite_acc`) and strict exact match of the greedy continuation;
- action / relation paraphrase generalization: the same on the 10 paraphrases each;
- neighbourhood score: mean |P_post - P_pre| of the whole " target_true" sequence on the 10
  neighbourhood prompts (lower is better), and locality: share of target positions whose argmax
  token is unchanged;
- edit robustness: pre-edit P(target_true) - P(target_new) on the edit prompt.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from sage.api import TargetScore, TargetScorer
from sage.editing.dataset import EditRequest

METRICS = (
    "reliability", "reliability_exact", "action_paraphrase", "action_paraphrase_exact",
    "relation_paraphrase", "relation_paraphrase_exact", "neighbourhood_score", "locality",
    "robustness",
)


def _queries(req: EditRequest) -> tuple[list[str], list[str]]:
    prompts = [req.prompt, req.prompt, *req.action_paraphrases, *req.relation_paraphrases,
               *req.neighbourhood]
    targets = [req.target_new, req.target_true]
    targets += [req.target_new] * (len(req.action_paraphrases) + len(req.relation_paraphrases))
    targets += [req.target_true] * len(req.neighbourhood)
    return prompts, targets


def observe(scorer: TargetScorer, req: EditRequest) -> dict[str, list[TargetScore]]:
    """All scores one entry needs from one model state, grouped by prompt kind."""
    prompts, targets = _queries(req)
    s = scorer.score(prompts, targets)
    a, r = len(req.action_paraphrases), len(req.relation_paraphrases)
    return {"new": s[0:1], "true": s[1:2], "action": s[2:2 + a], "relation": s[2 + a:2 + a + r],
            "neighbour": s[2 + a + r:]}


def _acc(scores: Sequence[TargetScore]) -> tuple[float, float]:
    return (float(np.mean([x.token_acc for x in scores])),
            float(np.mean([float(x.exact) for x in scores])))


def entry_metrics(pre: dict[str, list[TargetScore]], post: dict[str, list[TargetScore]]) -> dict:
    out: dict[str, float] = {}
    for name, key in (("reliability", "new"), ("action_paraphrase", "action"),
                      ("relation_paraphrase", "relation")):
        out[name], out[name + "_exact"] = _acc(post[key])
        out["pre_" + name], out["pre_" + name + "_exact"] = _acc(pre[key])
    diffs = [abs(b.seq_prob - a.seq_prob) for a, b in zip(pre["neighbour"], post["neighbour"])]
    out["neighbourhood_score"] = float(np.mean(diffs))
    same = [float(x == y) for a, b in zip(pre["neighbour"], post["neighbour"])
            for x, y in zip(a.argmax, b.argmax)]
    out["locality"] = float(np.mean(same)) if same else 1.0
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
