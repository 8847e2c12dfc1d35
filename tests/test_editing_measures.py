"""The CounterMoral entry measures against hand-worked examples with known probabilities."""
from __future__ import annotations

import math

import pytest

from sage.api import TargetScore, TargetScorer
from sage.editing.dataset import EditRequest
from sage.editing.entry_measures import (
    aggregate,
    entry_metrics,
    neighbourhood_measures,
    observe,
)


def ts(p: float, argmax=(1,), acc=0.0, routed=None) -> TargetScore:
    return TargetScore(token_acc=acc, exact=acc == 1.0, logprob=math.log(p), argmax=tuple(argmax),
                       routed=routed)


def test_neighbourhood_measures_hand_worked():
    # two neighbour prompts; P(target_true) and P(target_new) before and after the edit
    pre_true = [ts(0.02, (5, 6)), ts(0.001, (7,))]
    post_true = [ts(0.0002, (5, 9)), ts(0.001, (7,))]
    pre_new = [ts(0.001), ts(0.01)]
    post_new = [ts(0.05), ts(0.0001)]
    m = neighbourhood_measures(pre_true, post_true, pre_new, post_new)
    # paper: mean |P_post - P_pre| = (0.0198 + 0) / 2, floored by mean P_pre = 0.0105
    assert m["neighbourhood_score"] == pytest.approx(0.0099)
    assert m["neighbourhood_score_ceiling"] == pytest.approx(0.0105)
    # |log(0.0002 / 0.02)| = ln 100 on the first neighbour, 0 on the second
    assert m["neighbourhood_dlogp"] == pytest.approx(math.log(100) / 2)
    # success P(true) > P(new): before [yes, no], after [no, yes]
    assert m["pre_neighbourhood_success"] == 0.5 and m["neighbourhood_success"] == 0.5
    # rise of log P(new): ln 50 and ln 0.01
    assert m["neighbourhood_new_rise"] == pytest.approx((math.log(50) + math.log(0.01)) / 2)
    # argmax tokens: 5 = 5, 6 != 9, 7 = 7
    assert m["locality"] == pytest.approx(2 / 3)


def test_a_destroyed_neighbour_is_floored_in_the_paper_score_but_not_in_log_space():
    """Driving P(target_true) from 0.01 to 1e-6 on every neighbour moves the paper's score by
    at most its ceiling, 0.01; |d log P| sees a drop of ln(1e4)."""
    pre = [ts(0.01)] * 10
    post = [ts(1e-6)] * 10
    m = neighbourhood_measures(pre, post, [ts(1e-3)] * 10, [ts(0.5)] * 10)
    assert m["neighbourhood_score"] < m["neighbourhood_score_ceiling"] == pytest.approx(0.01)
    assert m["neighbourhood_dlogp"] == pytest.approx(math.log(1e4))
    assert m["pre_neighbourhood_success"] == 1.0 and m["neighbourhood_success"] == 0.0
    assert m["neighbourhood_new_rise"] == pytest.approx(math.log(500))


class _TableScorer(TargetScorer):
    """Probabilities from a table keyed by (prompt, target); routes the action paraphrases."""

    def __init__(self, table):
        self.table = table

    def score(self, prompts, targets):
        return [ts(self.table.get((p, t), 0.5), acc=1.0 if t == "new" else 0.0,
                   routed=p.startswith("para")) for p, t in zip(prompts, targets)]


def test_observe_groups_queries_and_entry_metrics_reads_them():
    req = EditRequest(uid="u", framework="f", subject="Lying", relation="is", target_true="true",
                      target_new="new", action_paraphrases=("para a", "para b"),
                      relation_paraphrases=("Lying seems",), neighbourhood=("Cheating is", "Stealing is"))
    pre = observe(_TableScorer({("Cheating is", "true"): 0.2, ("Cheating is", "new"): 0.1,
                                ("Stealing is", "true"): 0.3, ("Stealing is", "new"): 0.01,
                                ("Lying is", "true"): 0.4, ("Lying is", "new"): 0.1}), req)
    post = observe(_TableScorer({("Cheating is", "true"): 0.02, ("Cheating is", "new"): 0.1,
                                 ("Stealing is", "true"): 0.3, ("Stealing is", "new"): 0.01}), req)
    assert [len(pre[k]) for k in ("new", "true", "action", "relation", "neighbour", "neighbour_new")] \
        == [1, 1, 2, 1, 2, 2]
    m = entry_metrics(pre, post)
    assert m["reliability"] == 1.0 and m["pre_reliability"] == 1.0
    assert m["neighbourhood_score"] == pytest.approx(0.09)
    assert m["neighbourhood_dlogp"] == pytest.approx(math.log(10) / 2)
    assert m["pre_neighbourhood_success"] == 1.0 and m["neighbourhood_success"] == 0.5
    assert m["neighbourhood_new_rise"] == pytest.approx(0.0)
    assert m["robustness"] == pytest.approx(0.3)
    assert m["routed_action"] == 1.0 and m["routed_relation"] == 0.0 and m["routed_neighbour"] == 0.0
    agg = aggregate([m, {**m, "reliability": 0.0}])
    assert agg["reliability"] == {"mean": 0.5, "std": 0.5, "n": 2}
    assert agg["pre_neighbourhood_success"]["mean"] == 1.0
