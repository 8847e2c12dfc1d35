"""Wrapper methods are scored through their wrappers: the runner queries handle.scoring_model(),
which rewrites prompts (IKE), while the model's weights never change."""
from __future__ import annotations

import pytest

from sage.editing.editor_base import EditContext, make_editor
from sage.editing.dataset import load_countermoral
from sage.editing.entry_measures import observe
from sage.editing.handles import state_hashes
from sage.editing.target_scoring import LMScorer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_ike_scores_through_its_wrapper_and_excludes_the_entry(bundled_lm, countermoral_dir):
    pool = load_countermoral(countermoral_dir, "virtue_ethics", "broad")[:6]
    req = pool[0]
    editor = make_editor("ike", {"k": 3}, EditContext(pool=pool))
    demos = editor._retrieve(req)
    assert len(demos) == 3 and req.uid not in {d.uid for d in demos}
    before = state_hashes(bundled_lm.model)
    handle = editor.apply(bundled_lm, [req])
    wrapper = handle.scoring_model()
    assert wrapper.rewrite([req.prompt])[0].endswith("\nPrompt: " + req.prompt)
    assert req.target_new in wrapper.prefix and req.prompt not in wrapper.prefix.split("New Fact")[0]
    calls = wrapper.calls
    through = wrapper.score([req.prompt], [req.target_new])[0]
    assert wrapper.calls == calls + 1
    direct = LMScorer(bundled_lm.model, bundled_lm.tokenizer).score([req.prompt], [req.target_new])[0]
    # the wrapper is in the scoring path: the in-context edit raises P(target_new)
    assert through.seq_prob > 20 * direct.seq_prob
    handle.restore()
    assert state_hashes(bundled_lm.model) == before


def test_serac_icl_routes_in_scope_queries_to_the_prompted_model(bundled_lm, countermoral_dir):
    pool = load_countermoral(countermoral_dir, "care_ethics", "broad")[:8]
    req = pool[0]
    editor = make_editor("serac-icl", {}, EditContext(pool=pool))
    handle = editor.apply(bundled_lm, [req])
    wrapper = handle.scoring_model()
    routes = wrapper.route([*req.relation_paraphrases, *req.neighbourhood])
    in_scope = sum(r is not None for r in routes[:10])
    out_scope = sum(r is None for r in routes[10:])
    assert in_scope >= 7 and out_scope >= 5  # the classifier separates scope
    through = observe(wrapper, req)
    assert wrapper.calls == 1 and wrapper.routed_in_scope > 0
    assert [s.routed for s in through["relation"]] == [r is not None for r in routes[:10]]
    direct = observe(LMScorer(bundled_lm.model, bundled_lm.tokenizer), req)
    assert through["new"][0].seq_prob > 20 * direct["new"][0].seq_prob
    handle.restore()


def test_grace_adapter_acts_only_through_its_scorer(bundled_lm, countermoral_dir):
    pool = load_countermoral(countermoral_dir, "utilitarianism", "broad")[:2]
    req = pool[0]
    before = state_hashes(bundled_lm.model)
    base = LMScorer(bundled_lm.model, bundled_lm.tokenizer)
    pre = base.score([req.prompt], [req.target_new])[0]
    handle = make_editor("grace", {"steps": 10}).apply(bundled_lm, [req])
    try:
        wrapper = handle.scoring_model()
        through = wrapper.score([req.prompt], [req.target_new])[0]
        direct = base.score([req.prompt], [req.target_new])[0]  # hook installed but inactive
        assert through.routed is True and direct.routed is None
        assert through.seq_prob > 20 * pre.seq_prob and through.token_acc > pre.token_acc
        assert direct.seq_prob == pre.seq_prob
    finally:
        handle.restore()
    assert state_hashes(bundled_lm.model) == before


def test_grace_key_token_decides_what_the_codebook_fires_on(bundled_lm, countermoral_dir):
    """With the reference radius (absolute 1.0), a last-prompt-token key fires on the edit prompt
    only; a subject key fires on every relation paraphrase (same subject, same prefix) and on no
    neighbour. Hit rates reach the entry record as routed_*."""
    from sage.editing.runner import evaluate

    req = load_countermoral(countermoral_dir, "deontology", "broad")[0]
    # from_key: a hit at the subject conditions every later token, the relation's and target's too
    # (with the default replace_last only the subject token's output changes)
    rows = {key: evaluate(make_editor("grace", {"steps": 5, "key": key, "replacement": "from_key"}), bundled_lm,
                          [req], batch=False)[0] for key in ("prompt_last", "subject_last")}
    last, subj = rows["prompt_last"], rows["subject_last"]
    assert last["routed_edit"] == 1.0 and last["routed_relation"] == 0.0
    assert subj["routed_edit"] == 1.0 and subj["routed_relation"] == 1.0
    assert subj["routed_neighbour"] == 0.0 and subj["locality"] == 1.0
    assert subj["relation_paraphrase"] > last["relation_paraphrase"]


def test_grace_generates_through_its_adapter(bundled_lm, countermoral_dir):
    """Greedy generation goes through the codebook (issue 32 §4): a prompt the codebook fires on
    continues with exactly the tokens the teacher-forced scorer ranks first given the text so far
    (the adapter sees the same rows both ways), and differs from the unedited continuation;
    deferred prompts continue as on the unedited model."""
    from sage.editing.generation_measures import continuations, greedy_continuations, observe_generation

    req = load_countermoral(countermoral_dir, "deontology", "broad")[0]
    prompts = [req.prompt, *req.relation_paraphrases[:2], *req.neighbourhood[:2]]
    plain = greedy_continuations(bundled_lm, prompts, [8] * len(prompts))
    handle = make_editor("grace", {"steps": 5, "key": "subject_last"}).apply(bundled_lm, [req])
    try:
        wrapper = handle.scoring_model()
        got = continuations(bundled_lm, wrapper, prompts, [8] * len(prompts))
        routed = [s.routed for s in wrapper.score(prompts, ["x"] * len(prompts))]
        assert routed == [True, True, True, False, False]
        for prompt, text, before, hit in zip(prompts, got, plain, routed):
            if hit:
                assert text != before
                ids = bundled_lm.tokenizer(text, add_special_tokens=False).input_ids
                assert bundled_lm.tokenizer.decode(ids) == text  # the text re-tokenizes as generated
                scored = wrapper.score([prompt], [text[1:] if text.startswith(" ") else text])[0]
                assert scored.exact, (prompt, text, bundled_lm.tokenizer.decode(list(scored.argmax)))
            else:
                assert text == before
        assert observe_generation(bundled_lm, wrapper, req) is not None
    finally:
        handle.restore()


def test_serac_icl_batch_of_a_whole_framework_trains_on_the_others(bundled_lm, countermoral_dir):
    """A batch holding every entry of a framework leaves SERAC-ICL nothing to train on in that
    framework; the batch pool adds the other frameworks, never the entries under test."""
    from sage.editing.runner import editing_pool

    batch = load_countermoral(countermoral_dir, "deontology", "broad")
    pool = editing_pool(countermoral_dir, "deontology", "broad", batch=True)
    assert len(pool) == 120 and {r.framework for r in pool} == {
        "care_ethics", "deontology", "utilitarianism", "virtue_ethics"}
    editor = make_editor("serac-icl", {}, EditContext(pool=pool))
    handle = editor.apply(bundled_lm, batch)
    scorer = handle.scoring_model()
    assert len(scorer.memory) == 30
    routes = scorer.route([batch[3].relation_paraphrases[0], batch[3].neighbourhood[0]])
    assert routes[0] is not None and routes[0].uid == batch[3].uid
    handle.restore()
    single = editing_pool(countermoral_dir, "deontology", "broad", batch=False)
    assert {r.framework for r in single} == {"deontology"}


def test_shared_prefix_scoring_equals_full_rows(bundled_lm, countermoral_dir):
    """IKE's queries share their demonstrations: scored once over a cached prefix, they equal
    full rows (and a batch without a shared prefix is scored as before)."""
    pool = load_countermoral(countermoral_dir, "virtue_ethics", "broad")[:6]
    req = pool[0]
    handle = make_editor("ike", {"k": 3}, EditContext(pool=pool)).apply(bundled_lm, [req])
    wrapper = handle.scoring_model()
    prompts = wrapper.rewrite([req.prompt, *req.action_paraphrases, *req.neighbourhood])
    targets = [req.target_new] * 11 + [req.target_true] * 10
    shared = LMScorer(bundled_lm.model, bundled_lm.tokenizer)
    full = LMScorer(bundled_lm.model, bundled_lm.tokenizer)
    full.share_prefix = False
    a, b = shared.score(prompts, targets), full.score(prompts, targets)
    for x, y in zip(a, b):
        assert x.logprob == pytest.approx(y.logprob, abs=2e-4)
        assert x.argmax == y.argmax and x.token_acc == y.token_acc
    plain = [req.prompt, *req.neighbourhood]
    for x, y in zip(shared.score(plain, [req.target_new] * 11), full.score(plain, [req.target_new] * 11)):
        assert x == y
