"""SERAC as published: a scope classifier (the bundled MiniLM fine-tuned as a bi-encoder) and a
counterfactual model (a LoRA fine-tuned copy of the base model) are trained on held-out edits
(other frameworks' entries), the classifier's scope accuracy on the entries under test is
reported, queries are routed, and both trained parts are cached."""
from __future__ import annotations

import pytest

from sage.editing.editor_base import EditContext, make_editor
from sage.editing.dataset import load_countermoral
from sage.editing.entry_measures import observe
from sage.editing.handles import state_hashes
from sage.editing.target_scoring import LMScorer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

SMALL = {"cls_epochs": 1, "cls_max_pairs": 800, "cf_steps": 20, "cf_layers": 2}


def test_serac_trains_on_held_out_edits_reports_scope_accuracy_and_routes(
        bundled_lm, countermoral_dir, tmp_path, monkeypatch):
    from sage.editing import serac

    monkeypatch.setenv("SAGE_CACHE_DIR", str(tmp_path))
    held_out = [r for fw in ("care_ethics", "utilitarianism", "virtue_ethics")
                for r in load_countermoral(countermoral_dir, fw, "broad", 8)]
    under_test = load_countermoral(countermoral_dir, "deontology", "broad", 8)
    before = state_hashes(bundled_lm.model)
    editor = make_editor("serac", SMALL, EditContext(pool=under_test, held_out=held_out))
    req = under_test[0]
    handle = editor.apply(bundled_lm, [req])
    diag = editor.diagnostics()
    # trained on the held-out edits only, measured on the 8 entries it never saw
    assert diag["held_out_entries"] == 24 and diag["classifier"]["steps"] == 25
    acc = diag["scope_accuracy_under_test"]
    assert acc["n_entries"] == 8
    assert acc["balanced_accuracy"] > 0.75, acc
    assert acc["in_scope_relation"] > acc["in_scope_neighbour"] + 0.5
    scorer = handle.scoring_model()
    through = observe(scorer, req)
    assert through["new"][0].routed is True
    assert sum(s.routed for s in through["relation"]) >= 7
    assert sum(s.routed for s in through["neighbour"]) <= 3
    direct = observe(LMScorer(bundled_lm.model, bundled_lm.tokenizer), req)
    # the counterfactual model, given the edit, makes the new target far likelier
    assert through["new"][0].seq_prob > 20 * direct["new"][0].seq_prob
    # out-of-scope queries are answered by the untouched base model
    for a, b in zip(through["neighbour"], direct["neighbour"]):
        if not a.routed:
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)  # other batch padding
    # generation routes each prompt once: in scope, the counterfactual model continues the edit
    # context and the prompt; out of scope, the base model continues the prompt alone
    from sage.editing.generation_measures import continuations, greedy_continuations, observe_generation

    prompts = [req.prompt, *req.neighbourhood[:3], req.relation_paraphrases[0]]
    routes = scorer.route(prompts)
    assert routes[0] is not None and None in routes
    calls = []
    got = continuations(bundled_lm, scorer, prompts, [6] * len(prompts),
                        decided=lambda i, text: calls.append((i, text)) and False)
    assert {i for i, _ in calls} == set(range(len(prompts)))  # indices map back to the caller's rows
    for i, (prompt, route) in enumerate(zip(prompts, routes)):
        alone = (greedy_continuations(scorer.counterfactual, [serac.edit_context(route, prompt)], [6]) if route
                 else greedy_continuations(bundled_lm, [prompt], [6]))[0]
        assert got[i] == alone
        seen = [t for j, t in calls if j == i]  # the text so far, before each further token
        assert seen and all(alone.startswith(t) and len(t) < len(alone) for t in seen)
    assert observe_generation(bundled_lm, scorer, req)["texts"][0] == greedy_continuations(
        scorer.counterfactual, [serac.edit_context(req, req.prompt)],
        [len(bundled_lm.tokenizer(" " + req.target_new, add_special_tokens=False).input_ids) + 8])[0]
    handle.restore()
    assert state_hashes(bundled_lm.model) == before

    # a second editor with the same training set loads both parts from the cache
    def no_training(*_a, **_k):
        raise AssertionError("trained again")

    monkeypatch.setattr(serac, "train_scope_classifier", no_training)
    again = make_editor("serac", SMALL, EditContext(pool=under_test, held_out=held_out))
    h2 = again.apply(bundled_lm, [req])
    assert observe(h2.scoring_model(), req)["new"][0].logprob == pytest.approx(
        through["new"][0].logprob, abs=1e-6)
    assert again.diagnostics()["scope_accuracy_under_test"] == acc


def test_serac_refuses_to_run_without_held_out_edits(bundled_lm, countermoral_dir):
    from sage.errors import SageInputError

    pool = load_countermoral(countermoral_dir, "deontology", "broad", 3)
    with pytest.raises(SageInputError, match="held-out edits"):
        make_editor("serac", SMALL, EditContext(pool=pool)).apply(bundled_lm, [pool[0]])
