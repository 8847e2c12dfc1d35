"""The one editing loop: every (method, framework, entry) of a sweep is one unit of work.

`run_sweep(configs, executor)` is what `sage edit`, the experiments and the tests run, in this
process or on a Ray cluster. The driver refuses a batch mode a method cannot run in (one line,
before anything loads), checks each run's settings, reads the chosen entries once, skips those
already in the run's record store, and hands the rest out as units carrying their entries: one
entry per unit (one edit each), or a framework's remaining entries in one unit in batch mode. Each
worker loads the model once and keeps the editor of its latest (method, framework); every unit
returns `runner.evaluate`'s rows and only the driver appends them to `entries.jsonl`, so a lost
worker's unit is simply run again and a killed driver resumes where its store ends. Then
`runner.summarize` writes each run's summary.
"""
from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sage.data.records import RecordStore
from sage.editing.editor_base import check_batch_mode, make_editor
from sage.editing.dataset import EditRequest, load_all
from sage.editing.runner import (
    RunConfig,
    editing_context,
    evaluate,
    run_dir,
    run_settings,
    summarize,
)
from sage.executors import make_executor, run_units
from sage.models.causal_lm import load_causal_lm
from sage.provenance import check_resume_settings, git_revision
from sage.settings import default_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EditUnit:
    cfg: RunConfig
    framework: str
    requests: tuple[EditRequest, ...]  # read by the driver: workers read no entry files


class EditorCache:
    """The editor of the latest (method, settings, framework, mode) on a worker, built once and
    kept while units of that framework follow (its retrieval pool, SERAC's trained parts), as a
    sequential run keeps one. `sage edit`'s workers and the edit-consistency study's share it."""

    def __init__(self, device: str):
        self.device = device
        self._key, self._editor = None, None

    def get(self, method: str, seed: int, overrides: dict, data, framework: str, subset: str, batch: bool,
            corpus: str | None):
        key = json.dumps([method, seed, overrides, corpus, data, subset, batch, framework], sort_keys=True,
                         default=str)
        if key != self._key:
            self._editor = make_editor(method, {"seed": seed, **overrides},
                                       editing_context(data, framework, subset, batch, self.device, corpus,
                                                       method=method))
            self._key = key
        return self._editor


class EditWorker:
    """Holds the loaded model; `run(unit)` edits and scores the unit's entries and restores."""

    def __init__(self, model: str, device: str | None):
        self.model, self.device = model, device or default_device()  # resolved where the worker runs
        self.editors = EditorCache(self.device)

    def run(self, unit: EditUnit) -> tuple[list[dict], dict]:
        """(the unit's rows, the editor's diagnostics, e.g. SERAC's scope accuracy)."""

        cfg = replace(unit.cfg, device=self.device)
        lm = load_causal_lm(cfg.model, device=self.device, dtype=cfg.dtype,
                            device_map=cfg.device_map)  # loaded once per process
        editor = self.editors.get(cfg.method, cfg.seed, cfg.overrides, cfg.data, unit.framework, cfg.subset,
                                  cfg.batch, cfg.corpus)
        rows = evaluate(editor, lm, unit.requests, batch=cfg.batch)
        return rows, editor.diagnostics()


def pending_groups(items: Sequence, done, batch: bool, key=lambda item: item) -> list[tuple]:
    """The items not yet in `done` (a record store, or any container of keys), as units of work:
    all of them in one group in batch mode, else one each."""
    todo = tuple(item for item in items if key(item) not in done)
    if not todo:
        return []
    return [todo] if batch else [(item,) for item in todo]


def sweep_units(cfg: RunConfig, entries: dict[str, list[EditRequest]], store: RecordStore) -> list[EditUnit]:
    """The unfinished work of one run: an entry per unit, or a framework's entries in batch mode."""
    return [EditUnit(cfg, fw, group) for fw, requests in entries.items()
            for group in pending_groups(requests, store, cfg.batch, key=lambda r: r.uid)]


def run_sweep(configs: Sequence[RunConfig], executor=None, *, device: str | None = None) -> list[dict]:
    """Run every configured method (one `RunConfig` each) on `executor` (default: this process);
    returns each run's summary. `device`: the workers' torch device (default: each worker's own
    default, e.g. cuda on GPU workers)."""

    for cfg in configs:
        check_batch_mode(cfg.method, cfg.batch)
    ex = make_executor(executor)
    made_by = git_revision()  # the driver's code, stamped on every record the workers return
    added: set[int] = set()  # runs that got records in this call: their summaries take today's versions
    # per run, per framework: what the workers' editors reported, for the summaries
    found: dict[int, dict] = {id(cfg): {} for cfg in configs}
    try:
        for model in dict.fromkeys(cfg.model for cfg in configs):
            work: list[tuple[RecordStore, EditUnit]] = []
            for cfg in (c for c in configs if c.model == model):
                out = run_dir(cfg)
                check_resume_settings(out, run_settings(cfg), legacy=out / "summary.json")
                store = RecordStore(out / "entries.jsonl", key_field="uid")
                entries = load_all(cfg.data, cfg.frameworks, cfg.subset, cfg.limit)  # one read per run
                work += [(store, unit) for unit in sweep_units(cfg, entries, store)]
            if not work:
                continue

            def store_rows(i: int, result: tuple[list[dict], dict], work=work) -> None:
                (store, unit), (rows, diagnostics) = work[i], result
                store.append({**row, "git": made_by} for row in rows)
                added.add(id(unit.cfg))
                if diagnostics:
                    found[id(unit.cfg)][unit.framework] = diagnostics

            run_units(ex, functools.partial(EditWorker, model, device), [u for _, u in work],
                      key=f"edit:{model}:{device}", desc=f"edits ({ex.name})", size=lambda u: len(u.requests),
                      on_result=store_rows)
        return [summarize(cfg, diagnostics=found.get(id(cfg)), added=id(cfg) in added) for cfg in configs]
    finally:
        if ex is not executor:
            ex.close()
