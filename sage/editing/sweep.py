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
from sage.editing.base import check_batch_mode, make_editor
from sage.editing.dataset import EditRequest, load_all
from sage.editing.runner import (
    RunConfig,
    editing_context,
    evaluate,
    run_dir,
    run_settings,
    summarize,
)
from sage.executors import make_executor
from sage.models.causal_lm import load_causal_lm
from sage.progress import progress_bar
from sage.provenance import check_resume_settings, git_revision
from sage.settings import default_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EditUnit:
    cfg: RunConfig
    framework: str
    requests: tuple[EditRequest, ...]  # read by the driver: workers read no entry files


class EditWorker:
    """Holds the loaded model; `run(unit)` edits and scores the unit's entries and restores."""

    def __init__(self, model: str, device: str | None):
        self.model, self.device = model, device or default_device()  # resolved where the worker runs
        self._editor_key, self._editor = None, None

    def _editor_for(self, cfg: RunConfig, framework: str):
        key = json.dumps([cfg.method, cfg.seed, cfg.overrides, cfg.corpus, cfg.data, cfg.subset, cfg.batch,
                          framework], sort_keys=True, default=str)
        if key != self._editor_key:  # one editor per (method, framework), as the sequential run keeps
            self._editor = make_editor(cfg.method, {"seed": cfg.seed, **cfg.overrides},
                                       editing_context(cfg.data, framework, cfg.subset, cfg.batch,
                                                       self.device, cfg.corpus, method=cfg.method))
            self._editor_key = key
        return self._editor

    def run(self, unit: EditUnit) -> tuple[list[dict], dict]:
        """(the unit's rows, the editor's diagnostics, e.g. SERAC's scope accuracy)."""

        cfg = replace(unit.cfg, device=self.device)
        lm = load_causal_lm(cfg.model, device=self.device, dtype=cfg.dtype,
                            device_map=cfg.device_map)  # loaded once per process
        editor = self._editor_for(cfg, unit.framework)
        rows = evaluate(editor, lm, unit.requests, batch=cfg.batch)
        return rows, editor.diagnostics()


def sweep_units(cfg: RunConfig, entries: dict[str, list[EditRequest]], store: RecordStore) -> list[EditUnit]:
    """The unfinished work of one run: an entry per unit, or a framework's entries in batch mode."""
    units = []
    for fw, requests in entries.items():
        todo = tuple(r for r in requests if r.uid not in store)
        if todo:
            units += [EditUnit(cfg, fw, todo)] if cfg.batch else [EditUnit(cfg, fw, (r,)) for r in todo]
    return units


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
            key = f"edit:{model}:{device}"
            bar = progress_bar(total=sum(len(u.requests) for _, u in work), desc=f"edits ({ex.name})", unit="entry",
                               leave=False)
            try:
                for i, (rows, diagnostics) in ex.map(functools.partial(EditWorker, model, device),
                                                     [u for _, u in work], key=key):
                    work[i][0].append({**row, "git": made_by} for row in rows)
                    added.add(id(work[i][1].cfg))
                    if diagnostics:
                        found[id(work[i][1].cfg)][work[i][1].framework] = diagnostics
                    bar.update(len(rows))
            finally:
                bar.close()
                ex.release(key)
        return [summarize(cfg, diagnostics=found.get(id(cfg)), added=id(cfg) in added) for cfg in configs]
    finally:
        if ex is not executor:
            ex.close()
