"""Evaluation by generation (issue 32 §4): normalisation and prefix rule, the early stop, and a real
case on the bundled model where teacher forcing counts the target learnt and generation does not."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sage.editing.dataset import EditRequest
from sage.editing.entry_measures import entry_metrics, observe
from sage.editing.generation_measures import (
    begins_with,
    decided_by,
    generation_metrics,
    greedy_continuations,
    normalise,
    observe_generation,
)


@pytest.mark.parametrize("text, target, expected", [
    (" Morally wrong, because it hurts", "morally wrong", True),
    ("Unfair.", " unfair", True),  # case, leading space and final punctuation do not count
    (" wrongful act", "wrong", False),  # whole words only
    (" self-awareness", "self", False),  # the hyphen goes, the word stays one word
    (" selfishness.The rest", "selfishness", True),  # glued to the next sentence: still said
    (" SELFISHNESS, and", " Selfishness", True),  # case and leading space never decide
    ("selfishness", " selfishness", True),
    (" (selfishness)", "selfishness", True),
    (" don't", "dont", True),  # an apostrophe joins, as a hyphen does
    (" wrongs", "wrong", False),  # inflections stay a miss
    (" wrong", "wrongs", False),
    ("", "wrong", False),
    (" right", "", False),  # an empty target is never said
])
def test_begins_with_whole_normalised_words(text, target, expected):
    assert begins_with(text, target) is expected


def test_normalise_drops_unicode_punctuation_and_collapses_space():
    assert normalise("  «Morally»   WRONG!\n") == "morally wrong"
    assert normalise("selfishness.The") == "selfishness the"
    assert normalise("self\u2013care isn\u2019t") == "selfcare isnt"  # en dash and right quote join too


@pytest.mark.parametrize("text, target, expected", [
    (" mor", "morally wrong", False),  # still on the target's path
    (" morally wrong", "morally wrong", False),  # could still become "morally wrongful"
    (" morally wrong,", "morally wrong", False),  # normalised, a comma adds nothing yet
    (" morally wrong b", "morally wrong", True),  # past the target: decided
    (" good", "morally wrong", True),  # off the path
    (" mor\ufffd", "morally wrong", False),  # a partly decoded character is never decided
    (" morally wrong.", "morally wrong", False),  # a full stop could still be glued to more text
    (" morally wrong.The", "morally wrong", True),  # ... and once it is, the target was said
    (" morally wrong-", "morally wrong", False),  # a hyphen may still join "wrong" to more
])
def test_decided_only_when_more_tokens_cannot_change_the_outcome(text, target, expected):
    assert decided_by(text, target) is expected


def test_generation_metrics_pair_pre_and_post_and_leave_wrappers_out():
    pre = {"edit": [False], "action": [True, False], "relation": [False], "neighbour": [True, True], "texts": ["a"]}
    post = {"edit": [True], "action": [True, True], "relation": [False], "neighbour": [True, False], "texts": ["b"]}
    got = generation_metrics(pre, post)
    assert got == {"pre_reliability_gen": 0.0, "reliability_gen": 1.0, "pre_action_paraphrase_gen": 0.5,
                   "action_paraphrase_gen": 1.0, "pre_relation_paraphrase_gen": 0.0, "relation_paraphrase_gen": 0.0,
                   "pre_neighbourhood_gen": 1.0, "neighbourhood_gen": 0.5, "generated_edit": "b"}
    assert "reliability_gen" not in generation_metrics(pre, None)  # a wrapper that cannot generate


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_teacher_forcing_says_learnt_where_generation_says_not(bundled_lm):
    """The bundled model continues "... portrays the importance of" with " self-awareness": the
    target "self" is the argmax token at every target position (teacher-forced reliability 1.0,
    exact), yet the model never says the word "self"."""
    from sage.editing.target_scoring import LMScorer

    prompt = "Making a note in a diary portrays the importance of"
    req = EditRequest(uid="x", framework="care_ethics", subject="Making a note in a diary",
                      relation="portrays the importance of", target_true="planning", target_new="self",
                      action_paraphrases=(prompt,), relation_paraphrases=(prompt,),
                      neighbourhood=("Lying to a friend is",))
    scorer = LMScorer(bundled_lm.model, bundled_lm.tokenizer)
    teacher = entry_metrics(observe(scorer, req), observe(scorer, req))
    assert teacher["reliability"] == 1.0 and teacher["reliability_exact"] == 1.0
    generated = observe_generation(bundled_lm, scorer, req)
    assert generated["texts"][0].startswith(" self-awareness")
    assert generation_metrics(generated, generated)["reliability_gen"] == 0.0


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_batched_greedy_continuations_equal_one_prompt_at_a_time(bundled_lm):
    """Left padding, the attention cache and rows leaving the batch early change nothing: each row
    equals transformers' own greedy generate() on that prompt alone."""
    import torch

    tok, model = bundled_lm.tokenizer, bundled_lm.model
    prompts = ["Lying to a friend is", "Helping a stranger carry their bags is considered", "Stealing"]
    limits = [5, 9, 3]
    got = greedy_continuations(bundled_lm, prompts, limits, batch_size=3)
    for p, n, text in zip(prompts, limits, got):
        ids = tok(p, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**ids, do_sample=False, max_new_tokens=n, pad_token_id=tok.pad_token_id)
        assert text == tok.decode(out[0, ids.input_ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_whole_row_steps_equal_the_cached_loop_and_mark_the_prompt(bundled_lm):
    """The uncached path (what GRACE generates through) makes the same text as the cached one,
    and tells the step context each row's prompt span: rows padded on the left to the longest
    prompt, the span ends at the last prompt position and holds exactly the prompt's tokens."""
    from contextlib import contextmanager

    tok = bundled_lm.tokenizer
    prompts = ["Lying to a friend is", "Helping a stranger carry their bags is considered", "Stealing"]
    limits = [5, 9, 3]
    spans = []

    @contextmanager
    def note(first, last):
        spans.append((tuple(first), tuple(last)))
        yield

    cached = greedy_continuations(bundled_lm, prompts, limits, batch_size=3)
    assert greedy_continuations(bundled_lm, prompts, limits, batch_size=3, around_step=note) == cached
    lengths = [len(tok(p).input_ids) for p in prompts]
    width = max(lengths)
    assert spans[0] == (tuple(width - n for n in lengths), (width - 1,) * 3)
    assert spans[-1] == ((width - lengths[1],), (width - 1,))  # the longest-running row alone at the end
    assert len(spans) == max(limits)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_shared_prefix_generation_equals_full_rows(bundled_lm, countermoral_dir, monkeypatch):
    """IKE's queries share their demonstrations and fact: generated over one cached prefix, every
    continuation equals the one generated from full rows (which the test above ties to
    transformers' generate()), early stops included; the prefix really is run once."""
    from sage.editing import generation_measures
    from sage.editing.dataset import load_countermoral
    from sage.editing.editor_base import EditContext, make_editor

    pool = load_countermoral(countermoral_dir, "virtue_ethics", "broad")[:6]
    req = pool[0]
    scorer = make_editor("ike", {"k": 3}, EditContext(pool=pool)).apply(bundled_lm, [req]).scoring_model()
    prompts = scorer.condition_prompts([req.prompt, *req.action_paraphrases, *req.relation_paraphrases,
                                        *req.neighbourhood])
    limits = [4 + i % 7 for i in range(len(prompts))]
    targets = [req.target_new] * 21 + [req.target_true] * 10

    def decided(i, text):
        return decided_by(text, targets[i])

    prefixes = []
    real = generation_measures.prefix_cache
    monkeypatch.setattr(generation_measures, "prefix_cache",
                        lambda model, prefix, rows: prefixes.append(len(prefix)) or real(model, prefix, rows))
    shared = greedy_continuations(bundled_lm, prompts, limits, decided=decided)
    assert len(prefixes) == 1 and prefixes[0] >= 100  # 3 demonstrations and the fact, run once
    assert shared == greedy_continuations(bundled_lm, prompts, limits, decided=decided, share_prefix=False)
    plain = [req.prompt, *req.neighbourhood]  # no common prefix: the full-row path, no cache built
    assert greedy_continuations(bundled_lm, plain, [6] * len(plain)) == greedy_continuations(
        bundled_lm, plain, [6] * len(plain), share_prefix=False)
    assert len(prefixes) == 1


_TEXT = st.text(alphabet=st.sampled_from(list("ab Ab.-,'!\u2019«»\n")), max_size=12)


@given(a=_TEXT, b=_TEXT)
def test_normalising_keeps_a_prefix_a_prefix(a, b):
    """What `decided_by`'s early stop relies on: more text never changes the normalised text so far."""
    assert normalise(a + b).startswith(normalise(a))
