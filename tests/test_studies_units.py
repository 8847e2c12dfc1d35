"""Unit tests of the edit-consistency study's pieces against hand-worked or numpy references."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sage.errors import SageInputError
from sage.metrics.fluency import ngram_entropy
from sage.studies.edit_consistency import StudyConfig, paired_changes
from sage.studies.probes import _context_prefix, first_sentence, open_question


def test_ngram_entropy_hand_worked():
    # "a b a b": bigrams (a,b) x2, (b,a) x1 -> H2 = H(2/3, 1/3); trigrams (a,b,a), (b,a,b) -> H3 = 1 bit
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert ngram_entropy("a b a b") == pytest.approx((2 / 3 * h2 + 4 / 3 * 1.0) / 2)
    assert ngram_entropy("word") == 0.0  # no n-grams
    # repetition lowers fluency
    assert ngram_entropy("it is good " * 8) < ngram_entropy("honesty builds trust because people can rely on what you say")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=3, max_size=30))
def test_ngram_entropy_bounds(tokens):
    text = " ".join(tokens)
    h = ngram_entropy(text)
    # each n-gram entropy is at most log2(#n-grams); the weighted mean is bounded accordingly
    bound = (2 / 3 * math.log2(len(tokens) - 1) + 4 / 3 * math.log2(len(tokens) - 2)) / 2
    assert -1e-12 <= h <= bound + 1e-9


def test_first_sentence_and_context_prefix():
    assert first_sentence("\n  kindness to others. It also helps.\nMore") == "kindness to others."
    assert first_sentence(" no end mark") == "no end mark"
    assert first_sentence("\n\n") == ""
    assert _context_prefix("DEMOS\nPrompt: Is it ok?", "Is it ok?") == "DEMOS\nPrompt: "
    assert _context_prefix("Is it ok?", "Is it ok?") == ""


def test_open_question_lowercases_the_action(countermoral_dir):
    from sage.editing.dataset import load_countermoral

    req = load_countermoral(countermoral_dir, "care_ethics", "broad", 1)[0]
    q = open_question(req)
    assert q.startswith("Is " + req.subject[0].lower()) and q.endswith("morally right or wrong?")
    assert req.relation in open_question(req, "Does {action} {relation} anything?")


def test_paired_changes_match_numpy():
    rng = np.random.default_rng(0)
    uids = [f"u{i}" for i in range(12)]
    pre, post = rng.random(12), rng.random(12)
    post[3] = np.nan  # an undefined score drops that entry from the pair, not the others
    rows = [("pre", u, "action", "sge", v) for u, v in zip(uids, pre)]
    rows += [("rome", u, "action", "sge", v) for u, v in zip(uids, post)]
    df = pd.DataFrame(rows, columns=["state", "uid", "probe", "metric", "value"])
    out = paired_changes(df, ["rome"], n_boot=500, seed=1)
    [row] = out.to_dict(orient="records")
    ok = np.isfinite(post)
    diff = post[ok] - pre[ok]
    assert row["n"] == 11
    assert row["change"] == pytest.approx(diff.mean())
    assert row["pre"] == pytest.approx(pre[ok].mean()) and row["post"] == pytest.approx(post[ok].mean())
    # the percentile bootstrap of the paired differences (entries in uid order), recomputed here
    order = np.argsort(np.array(uids)[ok], kind="stable")
    diff = diff[order]
    idx = np.random.default_rng(1).integers(0, 11, size=(500, 11))
    lo, hi = np.quantile(diff[idx].mean(1), [0.025, 0.975])
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((lo, hi))


@pytest.mark.parametrize("kwargs, msg", [
    ({"methods": ("nope",)}, "unknown editing method"),
    ({"methods": ("rome:fast",)}, "':batch'"),
    ({"methods": ()}, "no methods"),
    ({"question_template": "Is it right?"}, "{action}"),
    ({"k": 0}, "k must be"),
    ({"overrides": {"memit": {}}, "methods": ("rome",)}, "not among the methods"),
])
def test_study_config_rejects_bad_settings(kwargs, msg):
    with pytest.raises(SageInputError, match=msg.replace("{", r"\{").replace("}", r"\}").replace("(", r"\(")):
        StudyConfig(**kwargs)
