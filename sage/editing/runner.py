"""One editing run's parts: its settings and directory, the editing context of a framework, the
evaluation of a group of entries (score before, edit, score through the handle's scoring model
(the edited model or the wrapper), restore: one row per entry) and the summary. The loop over
entries is `sage.editing.sweep.run_sweep`.

Layout: `<out>/<method>/<subset>[-batch]/entries.jsonl` (rerun skips finished entries),
`settings.json` (what the entries depend on: a rerun with other settings is refused rather than
mixed in) and `summary.json` (settings, library versions, git hash, mean ± std per framework and
overall). Each entry records the git hash of the code that made it (taken when its sitting
started), so a run resumed across commits says which entries came from which code.
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sage.data.records import RecordStore
from sage.editing.editor_base import EDITORS, EditContext, make_editor
from sage.editing.dataset import (
    FRAMEWORKS,
    SUBSETS,
    EditRequest,
    check_unique_uids,
    load_all,
    load_countermoral,
)
from sage.editing.entry_measures import aggregate, entry_metrics, observe
from sage.editing.generation_measures import generation_metrics, observe_generation
from sage.editing.key_statistics import corpus_name
from sage.editing.unedited_scores import UneditedScores
from sage.errors import SageInputError
from sage.outputs import write_text
from sage.provenance import check_resume_settings, git_revision, package_versions, torch_threads

log = logging.getLogger(__name__)


@dataclass
class RunConfig:
    method: str
    frameworks: Sequence[str]
    subset: str = "broad"
    model: str = "smollm2-135m"
    out: Path = Path("results/editing")
    data: str | None = None
    limit: int | None = None
    batch: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    corpus: str | None = None
    device: str = "cpu"
    seed: int = 0
    dtype: str = "float32"  # the weights'; editing numerics stay in float32/float64 whatever it is
    device_map: str | None = None


def run_dir(cfg: RunConfig) -> Path:
    return Path(cfg.out) / cfg.method / (cfg.subset + ("-batch" if cfg.batch else ""))


def editing_pool(data, framework: str, subset: str, batch: bool) -> list[EditRequest]:
    """Retrieval/training pool for IKE and SERAC-ICL (they never use the entries under test from
    it): the framework's subset; in batch mode every framework's, since a batch can be the whole
    framework subset and a scope classifier needs entries outside it."""
    return [r for f in pool_frameworks(framework, batch) for r in load_countermoral(data, f, subset)]


def pool_frameworks(framework: str, batch: bool) -> tuple[str, ...]:
    return FRAMEWORKS if batch else (framework,)


def held_out_entries(data, framework: str, subset: str) -> list[EditRequest]:
    """The other frameworks' entries of the subset: what SERAC trains on (held-out edits, as the
    paper trains on edits other than those it is tested on)."""
    return [r for f in FRAMEWORKS if f != framework for r in load_countermoral(data, f, subset)]


def context_frameworks(method: str, framework: str, batch: bool) -> tuple[str, ...]:
    """The frameworks whose files an editor of `framework`'s entries reads besides that framework's
    own (its pool and held-out entries): checked before any model loads."""

    cls = EDITORS.get(method)
    needed = set(pool_frameworks(framework, batch)) if cls.uses_pool else set()
    if cls.uses_held_out:
        needed |= set(FRAMEWORKS) - {framework}
    return tuple(f for f in FRAMEWORKS if f in needed and f != framework)


def check_data(data, runs: Sequence[tuple[str, bool]], frameworks: Sequence[str], subset: str,
               limit: int | None = None) -> None:
    """Parse every CounterMoral file a run will read, before any model loads: the entries of
    `frameworks`, and for each (method, batch) of `runs` the other frameworks its editor reads
    (IKE's or SERAC's pool, SERAC's held-out training edits). One clear line otherwise."""
    load_all(data, frameworks, subset, limit)
    for method, batch in runs:
        for fw in frameworks:
            for other in context_frameworks(method, fw, batch):
                try:
                    load_countermoral(data, other, subset)
                except SageInputError as exc:
                    raise SageInputError(f"method {method!r} also reads the {other} entries (its retrieval or "
                                         f"training pool for {fw}): {exc}") from None


def editing_context(data, framework: str, subset: str, batch: bool, device: str = "cpu",
                    corpus: str | None = None, method: str | None = None) -> EditContext:
    """What an editor of `framework`'s entries may use besides the model; with `method`, only the
    parts that method reads (`EditorBase.uses_pool`, `uses_held_out`)."""

    cls = EDITORS.get(method) if method is not None else None
    return EditContext(pool=editing_pool(data, framework, subset, batch) if cls is None or cls.uses_pool else (),
                       held_out=held_out_entries(data, framework, subset) if cls is None or cls.uses_held_out else (),
                       device=device, corpus=corpus)


def sequential_context(data, subset: str, device: str = "cpu", corpus: str | None = None,
                       method: str | None = None) -> EditContext:
    """What an editor of a sequence may use besides the model: its retrieval pool (IKE, SERAC-ICL)
    and held-out training edits (SERAC) are the *other* subset's entries of every framework, so
    nothing it retrieves or trains on is an entry of the sequence (which may be the whole subset)."""
    cls = EDITORS.get(method) if method is not None else None
    other = next(s for s in SUBSETS if s != subset)
    needed = cls is None or cls.uses_pool or cls.uses_held_out
    entries = [r for f in FRAMEWORKS for r in load_countermoral(data, f, other)] if needed else []
    return EditContext(pool=entries if cls is None or cls.uses_pool else (),
                       held_out=entries if cls is None or cls.uses_held_out else (), device=device, corpus=corpus)


def evaluate(editor, lm, requests: Sequence[EditRequest], batch: bool, during=None,
             git: str | None = None, unedited: UneditedScores | None = None) -> list[dict]:
    """Edit and score `requests`; one row per request. In batch mode one edit holds them all.

    Each entry is scored teacher-forced (`entry_measures`) and by greedy generation
    (`generation_measures`), before the edit on the unedited model (`unedited_scores`: cached
    across methods) and after it through the handle's scoring model. `during(scoring_model,
    group) -> {uid: value}` runs while the edit is applied (studies generate through it); each
    value lands in its request's row under "during". `unedited`: where the unedited scores are
    cached (default: sage's cache directory)."""
    unedited = unedited or UneditedScores(lm)  # shared by every method: computed once per model and entry
    groups = [list(requests)] if batch else [[r] for r in requests]
    rows = []
    for group in groups:
        start = time.perf_counter()
        pres, pre_gen = zip(*[unedited.get(r) for r in group])
        t0 = time.perf_counter()
        handle = editor.apply(lm, group)
        seconds = time.perf_counter() - t0
        try:
            scorer = handle.scoring_model()
            posts = [observe(scorer, r) for r in group]
            post_gen = [observe_generation(lm, scorer, r) for r in group]
            extra = during(scorer, group) if during is not None else None
        finally:
            handle.restore()
        # The whole group's cost (scoring before and after, edit, restore): what a full run's
        # CPU-time estimate is built from; edit_seconds alone leaves out the evaluation.
        wall = time.perf_counter() - start
        for r, pre, post, pg, qg in zip(group, pres, posts, pre_gen, post_gen):
            rows.append({"uid": r.uid, "framework": r.framework, "edit_seconds": seconds,
                         "group_seconds": wall, "batch_size": len(group), **entry_metrics(pre, post),
                         **generation_metrics(pg, qg),
                         **({"during": extra[r.uid]} if extra is not None else {}),
                         **({"git": git} if git is not None else {}), "torch_threads": torch_threads()})
    return rows


def method_settings(method: str, seed: int, overrides: dict[str, Any], corpus: str | None) -> dict:
    """An editing method's part of what results depend on: its resolved hyperparameters."""
    hparams = make_editor(method, {"seed": seed, **overrides}).hparams.to_dict()

    return {"method": method, "seed": seed, "hparams": hparams, "corpus": corpus_name(corpus)}


def run_settings(cfg: RunConfig) -> dict:
    """What a run's per-entry results depend on (a rerun with other settings is refused)."""
    out = {**method_settings(cfg.method, cfg.seed, cfg.overrides, cfg.corpus),
           "subset": cfg.subset, "batch": cfg.batch, "model": cfg.model}
    if cfg.dtype != "float32":  # named only when not the default, so float32 runs resume as before
        out["dtype"] = cfg.dtype
    return out


def run_seconds(rows: Sequence[dict]) -> dict:
    """Seconds spent per entry (a batch's cost shared among its entries), edit alone and the whole
    evaluation, over the entries that recorded it (runs before `group_seconds` lack it)."""
    timed = [r for r in rows if "group_seconds" in r]
    if not timed:
        return {}
    per_entry = [r["group_seconds"] / r.get("batch_size", 1) for r in timed]
    edit = [r["edit_seconds"] / r.get("batch_size", 1) for r in timed]
    return {"entries_timed": len(timed), "per_entry_median": float(np.median(per_entry)),
            "per_entry_mean": float(np.mean(per_entry)), "edit_per_entry_mean": float(np.mean(edit)),
            "total": float(np.sum(per_entry))}


def records_git(rows: Sequence[dict]) -> dict[str, int]:
    """How many entries each commit made ("unrecorded": entries written before records carried it)."""
    return dict(sorted(Counter(r.get("git") or "unrecorded" for r in rows).items()))


def _previous_summary(out: Path) -> dict:
    """The summary an earlier sitting of a resumed run wrote ({} if none or unreadable)."""
    try:
        return dict(json.loads((out / "summary.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def summarize(cfg: RunConfig, diagnostics: dict | None = None, added: bool = False) -> dict:
    """Write and return one run's summary.json from its record store (entries are made by
    `sage.editing.sweep.run_sweep`); a partial run is marked with its count.
    `diagnostics`: per framework, what the sweep's editors reported; `added`: the caller has just
    stored new entries, so the summary takes today's versions and git hash rather than an earlier
    summary's."""
    data = load_all(cfg.data, cfg.frameworks, cfg.subset, cfg.limit)
    out = run_dir(cfg)
    settings = run_settings(cfg)
    check_resume_settings(out, settings, legacy=out / "summary.json")
    done = RecordStore(out / "entries.jsonl", key_field="uid").records
    previous = _previous_summary(out)
    diagnostics = {**(previous.get("editor") or {}), **(diagnostics or {})}
    # A directory filled one framework per call (`sage edit --framework X`) is summarised whole:
    # frameworks with records here are included even when this call did not ask for them.
    present = {row.get("framework") for row in done.values()}
    for fw in FRAMEWORKS:
        if fw in present and fw not in data:
            data[fw] = load_countermoral(cfg.data, fw, cfg.subset, cfg.limit)
    data = {fw: data[fw] for fw in FRAMEWORKS if fw in data}
    check_unique_uids(data)
    wanted = {r.uid for reqs in data.values() for r in reqs}
    rows = [row for uid, row in done.items() if uid in wanted]
    # Versions and git hash describe the code that made the records: a call that only summarises
    # (e.g. on a machine without torch installed) keeps the ones recorded when they were made.
    if not added and previous.get("versions"):
        versions, git = previous["versions"], previous.get("git")
    else:
        versions, git = package_versions(), git_revision()
    summary = {
        **settings, "limit": cfg.limit, "versions": versions, "git": git,
        "frameworks": {fw: aggregate(r for r in rows if r["framework"] == fw) for fw in data},
        "overall": aggregate(rows), "n_entries": len(rows), "n_expected": len(wanted),
        "editor": diagnostics, "seconds": run_seconds(rows), "records_git": records_git(rows),
    }
    if previous.get("versions_note"):  # what is known of versions an earlier sitting did not record
        summary = {**summary, "versions_note": previous["versions_note"]}
    write_text(out / "summary.json", json.dumps(summary, indent=2))
    return summary
