"""`--preset`: the preset's values become defaults of `sage score`; options given explicitly win."""
from __future__ import annotations

import pytest


def _params(*args):
    from sage.cli.score import command

    return command.make_context("score", list(args)).params  # the real command's parser, not invoked


def test_sage_paper_preset_sets_the_papers_configuration():
    p = _params("--preset", "sage-paper")
    assert (p["embedder"], p["min_parascore"], p["paraphrases"], p["on"]) == (
        "stsb-distilroberta-base-v2", 0.8, 5, "answer,rot")


def test_explicit_options_override_the_preset_wherever_they_stand():
    p = _params("--paraphrases", "3", "--preset", "sage-paper", "--embedder", "all-MiniLM-L6-v2")
    assert (p["embedder"], p["paraphrases"], p["min_parascore"]) == ("all-MiniLM-L6-v2", 3, 0.8)


def test_no_preset_keeps_the_declared_defaults():
    p = _params()
    assert (p["preset"], p["embedder"], p["paraphrases"], p["min_parascore"], p["on"]) == (None, None, 5, None, None)


def test_unknown_preset_is_one_line():
    from sage.errors import SageInputError

    with pytest.raises(SageInputError, match="unknown preset 'paper'; choose one of: sage-paper"):
        _params("--preset", "paper")


def test_every_preset_value_names_an_option_of_score():
    from sage.cli.presets import PRESETS
    from sage.cli.score import command

    names = {p.name for p in command.params}
    for name in PRESETS.names():
        assert set(PRESETS.get(name).values) <= names
