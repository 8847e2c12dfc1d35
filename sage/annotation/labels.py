"""Label schemes and normalisation of the many ways people write a label.

Two schemes: `nli` (entailment / neutral / contradiction) and `binary` (same / different stance).
`normalise_label` maps spellings such as "E", "entails", "Y", "1", "yes" onto the canonical names and
returns None for a blank cell (an annotator who skipped the item).
"""
from __future__ import annotations

import math
from typing import Any

from sage.errors import SageInputError

NLI = ("entailment", "neutral", "contradiction")
BINARY = ("same", "different")
SCHEMES: dict[str, tuple[str, ...]] = {"nli": NLI, "binary": BINARY}

_NLI_ALIASES = {
    "entailment": "entailment", "entail": "entailment", "entails": "entailment", "e": "entailment",
    "entailed": "entailment", "neutral": "neutral", "n": "neutral", "neither": "neutral",
    "contradiction": "contradiction", "contradict": "contradiction", "contradicts": "contradiction",
    "c": "contradiction", "contradictory": "contradiction",
}
_BINARY_ALIASES = {
    "same": "same", "y": "same", "yes": "same", "1": "same", "true": "same", "t": "same",
    "1.0": "same", "consistent": "same", "same stance": "same", "same-stance": "same",
    "different": "different", "n": "different", "no": "different", "0": "different",
    "false": "different", "f": "different", "0.0": "different", "inconsistent": "different",
    "different stance": "different", "different-stance": "different",
}
_ALIASES = {"nli": _NLI_ALIASES, "binary": _BINARY_ALIASES}
_BLANKS = {"", "nan", "none", "null", "na", "n/a", "-", "skip", "skipped"}


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise SageInputError(f"unknown label scheme {scheme!r}; choose one of: {', '.join(SCHEMES)}")
    return scheme


def _key(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return str(int(value))
    key = " ".join(str(value).strip().lower().split())
    return None if key in _BLANKS else key


def normalise_label(value: Any, scheme: str, where: str) -> str | None:
    """Canonical label, or None for a blank/skipped cell. `where` names the file/row/column for errors."""
    key = _key(value)
    if key is None:
        return None
    label = _ALIASES[scheme].get(key)
    if label is None:
        accepted = ", ".join(sorted(set(_ALIASES[scheme])))
        raise SageInputError(
            f"{where}: label {value!r} is not a {scheme} label; use one of: {accepted} "
            f"(or pass --scheme {'binary' if scheme == 'nli' else 'nli'} if the file uses that scheme)"
        )
    return label


def fits_scheme(value: Any, scheme: str) -> bool:
    """True for a blank cell or a spelling of one of the scheme's labels."""
    key = _key(value)
    return key is None or key in _ALIASES[scheme]


def detect_scheme(values: list[Any], where: str) -> str:
    """`nli` if every non-blank value is an NLI spelling, else `binary` if all are binary spellings."""
    keys = {k for k in (_key(v) for v in values) if k is not None}
    if not keys:
        raise SageInputError(f"{where}: no labels found; fill in at least one annotator label")
    # "n" is both neutral and no: prefer NLI only when some unambiguous NLI spelling occurs.
    nli_only = keys - (_BINARY_ALIASES.keys() & _NLI_ALIASES.keys())
    if keys <= _NLI_ALIASES.keys() and (nli_only & _NLI_ALIASES.keys()):
        return "nli"
    if keys <= _BINARY_ALIASES.keys():
        return "binary"
    if keys <= _NLI_ALIASES.keys():
        return "nli"
    bad = sorted(keys - _NLI_ALIASES.keys() - _BINARY_ALIASES.keys())[:5]
    raise SageInputError(
        f"{where}: cannot tell the label scheme; unrecognised labels {bad}; "
        f"use entailment/neutral/contradiction or Y/N, 1/0, yes/no, or pass --scheme"
    )


# Pair-level consistency of one label under each definition of "consistent" (see correlation.py).
def label_value(label: str, definition: str) -> float:
    if label in BINARY:
        return 1.0 if label == "same" else 0.0
    if definition == "entail":
        return 1.0 if label == "entailment" else 0.0
    if definition == "not-contradict":
        return 0.0 if label == "contradiction" else 1.0
    if definition == "graded":
        return {"entailment": 1.0, "neutral": 0.5, "contradiction": 0.0}[label]
    raise SageInputError(f"unknown consistency definition {definition!r}; use entail, not-contradict or graded")
