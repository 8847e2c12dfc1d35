"""Named option presets for `sage score`: one table, values keyed by the command's option names.

`--preset NAME` fills in these values as defaults; any option given explicitly on the command line
wins over the preset (tested). The effective values are what the run records in summary.json.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sage.registry import Registry


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    values: dict = field(default_factory=dict)  # option name (as the command's parameter) -> value


PRESETS: Registry[Preset] = Registry("preset")


def _preset(name: str, description: str, **values) -> Preset:
    return PRESETS.register(name)(Preset(name, description, dict(values)))


# The SaGE paper's configuration (Bonagiri et al., LREC-COLING 2024): answers and RoTs embedded with
# stsb-distilroberta-base-v2 (their scripts/pipeline.py), paraphrases kept at ParaScore >= 0.8 (the
# paper; their code used 0.6), 5 per question (their code stops at 5 valid paraphrases, and every
# released question file has exactly 5 per question), SGE on answers and RoTs.
_preset(
    "sage-paper",
    "the SaGE paper's setup: stsb-distilroberta-base-v2 embedder, 5 paraphrases at ParaScore >= 0.8, "
    "SGE on answers and RoTs",
    embedder="stsb-distilroberta-base-v2",
    min_parascore=0.8,
    paraphrases=5,
    on="answer,rot",
)
