"""Loader for the CounterMoral JSON format (`<dir>/<framework>/entries[-broad].json`).

Every problem with a file raises `SageInputError` with one line naming the file, the entry and the
field, and saying how to fix it. Both spellings `neighborhood_prompts` (the published data) and
`neighbourhood_prompts` are accepted.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sage.data.download import find_dataset
from sage.errors import SageInputError

FRAMEWORKS = ("care_ethics", "deontology", "utilitarianism", "virtue_ethics")
SUBSETS = {"broad": "entries-broad.json", "specific": "entries.json"}
_TEMPLATE_FIELDS = ("action", "relation", "target_true", "target_new")
_LIST_FIELDS = ("action_paraphrased_prompts", "relation_paraphrased_prompts")
_NEIGHBOUR_FIELDS = ("neighborhood_prompts", "neighbourhood_prompts")


@dataclass(frozen=True)
class EditRequest:
    """One CounterMoral edit: `prompt` = action + " " + relation, subject = action."""

    uid: str
    framework: str
    subject: str
    relation: str
    target_true: str
    target_new: str
    action_paraphrases: tuple[str, ...]
    relation_paraphrases: tuple[str, ...]
    neighbourhood: tuple[str, ...]

    @property
    def prompt(self) -> str:
        return f"{self.subject} {self.relation}"

    @property
    def template(self) -> str:
        """The prompt with `{}` in place of the subject (ROME-style rewrite template)."""
        return "{} " + self.relation


def default_data_dir() -> Path:
    """Where CounterMoral is read from without --data, in order:

    `$SAGE_SHARED_DATA/countermoral` when that variable is set and the folder exists (development,
    tests); the verified copy `sage data download countermoral` put in the sage cache; a
    development checkout's `../shared/data/countermoral` (only when SAGE_SHARED_DATA is unset);
    else the pinned files are downloaded into the cache now, or, offline or without network, one
    line says how to get them.
    """

    return find_dataset("countermoral", hint=", or pass --data DIR (a folder with <framework>/entries.json)")


def _str_list(entry: dict, key: str, where: str, min_len: int = 1) -> tuple[str, ...]:
    value = entry.get(key)
    if not isinstance(value, list) or len(value) < min_len or not all(
        isinstance(v, str) and v.strip() for v in value
    ):
        raise SageInputError(
            f"{where}: field {key!r} must be a list of at least {min_len} non-empty strings; "
            "fix the entry or regenerate the file"
        )
    return tuple(value)


def parse_entry(entry: object, where: str, framework: str, position: int = 0) -> EditRequest:
    """One entry; without `meta_data.unique_id` its uid is `<framework>:<position>` (0-based
    position in its file), so entries of two frameworks never share a uid."""
    if not isinstance(entry, dict):
        raise SageInputError(f"{where}: expected a JSON object per entry; fix the file")
    tmpl = entry.get("edit_template")
    if not isinstance(tmpl, dict):
        raise SageInputError(f"{where}: missing field 'edit_template' (an object with "
                             f"{', '.join(_TEMPLATE_FIELDS)}); add it")
    for key in _TEMPLATE_FIELDS:
        if not isinstance(tmpl.get(key), str) or not tmpl[key].strip():
            raise SageInputError(f"{where}: field 'edit_template.{key}' is missing or empty; add it")
    lists = [_str_list(entry, key, where) for key in _LIST_FIELDS]
    present = [k for k in _NEIGHBOUR_FIELDS if k in entry]
    if not present:
        raise SageInputError(f"{where}: missing field 'neighborhood_prompts' "
                             "(or 'neighbourhood_prompts'); add the list of neighbourhood prompts")
    neighbours = _str_list(entry, present[0], where)
    meta = entry.get("meta_data") if isinstance(entry.get("meta_data"), dict) else {}
    given = meta.get("unique_id")
    uid = str(given).strip() if given is not None and str(given).strip() else f"{framework}:{position}"
    return EditRequest(
        uid=uid, framework=framework, subject=tmpl["action"].strip(),
        relation=tmpl["relation"].strip(), target_true=tmpl["target_true"].strip(),
        target_new=tmpl["target_new"].strip(), action_paraphrases=lists[0],
        relation_paraphrases=lists[1], neighbourhood=neighbours,
    )


def load_file(path: Path, framework: str) -> list[EditRequest]:
    """The entries of one file, parsed once per process while the file is unchanged (a sweep asks
    for the same file once per unit)."""
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        raise SageInputError(f"{path}: file not found; pass --data pointing at the CounterMoral "
                             "directory (with <framework>/entries.json)") from None
    return list(_parsed(str(path), str(Path(path).resolve()), framework, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=64)
def _parsed(path: str, resolved: str, framework: str, mtime_ns: int, size: int) -> tuple[EditRequest, ...]:
    """`path` as the user gave it (for messages); the file's resolved path, mtime and size key the cache."""
    try:
        data = json.loads(Path(resolved).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SageInputError(f"{path}: malformed JSON ({exc}); fix or re-download the file") from None
    if not isinstance(data, list) or not data:
        raise SageInputError(f"{path}: expected a non-empty JSON list of entries; fix the file")
    out = [parse_entry(e, f"{path} entry {i}", framework, i) for i, e in enumerate(data)]
    seen: set[str] = set()
    for i, req in enumerate(out):
        if req.uid in seen:
            raise SageInputError(f"{path} entry {i}: duplicate meta_data.unique_id {req.uid!r}; "
                                 "make the ids unique")
        seen.add(req.uid)
    return tuple(out)


def load_countermoral(data_dir: str | Path | None, framework: str, subset: str = "broad",
                      limit: int | None = None) -> list[EditRequest]:
    """Entries of one framework and subset (`broad`: 30 entries, `specific`: 300)."""
    if framework not in FRAMEWORKS:
        raise SageInputError(f"unknown framework {framework!r}; choose one of: {', '.join(FRAMEWORKS)}")
    if subset not in SUBSETS:
        raise SageInputError(f"unknown subset {subset!r}; choose one of: {', '.join(SUBSETS)}")
    root = Path(data_dir) if data_dir else default_data_dir()
    if not root.is_dir():
        raise SageInputError(f"{root}: CounterMoral directory not found; pass --data DIR")
    reqs = load_file(root / framework / SUBSETS[subset], framework)
    return reqs[:limit] if limit else reqs


def load_all(data_dir: str | Path | None, frameworks: Sequence[str], subset: str,
             limit: int | None = None) -> dict[str, list[EditRequest]]:
    """Entries of several frameworks, checked to have distinct uids across them (one record
    store holds a run's entries of every framework, keyed by uid)."""
    data = {fw: load_countermoral(data_dir, fw, subset, limit) for fw in frameworks}
    check_unique_uids(data)
    return data


def check_unique_uids(data: dict[str, Sequence[EditRequest]]) -> None:
    seen: dict[str, str] = {}
    for fw, reqs in data.items():
        for req in reqs:
            if seen.setdefault(req.uid, fw) != fw:
                raise SageInputError(f"meta_data.unique_id {req.uid!r} is used in both {seen[req.uid]} and {fw}; "
                                     "make the ids unique across frameworks (or remove them: entries without one "
                                     "get <framework>:<position>)")
