"""The unedited-model scores every method shares (`sage.editing.unedited_scores`): a hit returns
what was computed, without running the model; anything that decides the scores changes the key."""
from __future__ import annotations

import dataclasses

import pytest

from sage.editing.dataset import EditRequest
from sage.editing.entry_measures import observe
from sage.editing.generation_measures import observe_generation
from sage.editing.target_scoring import LMScorer
from sage.editing.unedited_scores import UneditedScores, entry_key, scores_from_json, scores_to_json

REQ = EditRequest(uid="CARE_ETHICS_1_", framework="care_ethics", subject="Lying to a friend",
                  relation="is considered", target_true="wrong", target_new="kind",
                  action_paraphrases=("Telling a friend a lie is considered",),
                  relation_paraphrases=("Lying to a friend is seen as",),
                  neighbourhood=("Helping a stranger is considered", "Stealing bread is considered"))
IDENTITY = {"name": "m", "files": "abc", "dtype": "torch.float32", "device": "cpu"}


def test_key_changes_with_everything_that_decides_the_scores():
    base = entry_key(IDENTITY, REQ, 32)
    assert base == entry_key(dict(IDENTITY), dataclasses.replace(REQ), 32)  # equal content, equal key
    others = [entry_key({**IDENTITY, "files": "abd"}, REQ, 32), entry_key({**IDENTITY, "dtype": "torch.bfloat16"}, REQ, 32),
              entry_key({**IDENTITY, "device": "cuda"}, REQ, 32), entry_key(IDENTITY, REQ, 16),
              entry_key(IDENTITY, dataclasses.replace(REQ, target_new="cruel"), 32),
              entry_key(IDENTITY, dataclasses.replace(REQ, neighbourhood=REQ.neighbourhood[:1]), 32),
              entry_key(IDENTITY, dataclasses.replace(REQ, uid="CARE_ETHICS_2_"), 32)]
    assert len({base, *others}) == 1 + len(others)


def test_scores_round_trip_through_json_exactly():
    from sage.api import TargetScore

    obs = {"new": [TargetScore(1 / 3, False, -12.345678901234567, (5, 7), None)],
           "neighbour": [TargetScore(1.0, True, -0.1, (9,), True)]}
    assert scores_from_json(scores_to_json(obs)) == obs


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_hit_returns_the_first_computation_without_running_the_model(bundled_lm, tmp_path):
    path = tmp_path / "unedited.sqlite"
    first = UneditedScores(bundled_lm, path)
    scores, generation = first.get(REQ)
    assert (first.hits, first.misses) == (0, 1)
    direct = LMScorer(bundled_lm.model, bundled_lm.tokenizer)  # what an uncached run computes
    assert scores == observe(direct, REQ) and generation == observe_generation(bundled_lm, direct, REQ)
    first.close()

    calls = []
    hook = bundled_lm.model.get_input_embeddings().register_forward_hook(lambda *a: calls.append(1))
    try:
        again = UneditedScores(bundled_lm, path)  # another process's view of the same file
        assert again.get(REQ) == (scores, generation)
        assert (again.hits, again.misses, calls) == (1, 0, [])
        again.get(dataclasses.replace(REQ, target_new="cruel"))  # another entry: computed
        assert again.misses == 1 and calls
    finally:
        hook.remove()
