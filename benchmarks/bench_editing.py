"""Median seconds and peak memory per edit for each editing method on the bundled model.

Statistics (covariance) are computed once before timing, so ROME/MEMIT/AlphaEdit times are
"statistics cached". MEMIT and AlphaEdit (`--batch-methods`) are also timed on one batch of
`--batch-size` broad entries (all four frameworks), `--batch-repeats` times per `--batch-variants`
setting (median seconds), with the batch's mean edit metrics so speed and quality are read side by
side.

    python benchmarks/bench_editing.py --methods rome ft --repeats 3 --json /tmp/bench/editing.json

Targets (not asserted): ROME <= 5 s per edit once statistics are cached; MEMIT 120 edits in one
batch < 2 minutes (2 CPU cores).
"""
from __future__ import annotations

import argparse
import json
import logging
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

from bench_output import emit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

log = logging.getLogger("bench_editing")


class PeakRSS:
    """Peak resident memory (MiB) sampled while a block runs, above the starting level."""

    def __enter__(self):
        import psutil

        self._proc = psutil.Process()
        self.start = self._proc.memory_info().rss
        self.peak = self.start
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.02)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.delta_mib = (self.peak - self.start) / 2**20
        self.peak_mib = self.peak / 2**20


def main(argv=None) -> int:
    from sage.editing.editor_base import EDITORS, make_editor
    from sage.editing.dataset import FRAMEWORKS, default_data_dir, load_countermoral
    from sage.editing.entry_measures import entry_metrics, observe
    from sage.editing.runner import editing_context
    from sage.editing.target_scoring import LMScorer
    from sage.models.causal_lm import load_causal_lm

    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", nargs="*", default=None)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=120)
    ap.add_argument("--batch-methods", nargs="*", default=["memit", "alphaedit"])
    ap.add_argument("--batch-repeats", type=int, default=3, help="timed runs per batch variant (median)")
    ap.add_argument("--batch-variants", default='{"default": {}, "no-context": {"n_context": 0}}',
                    help="JSON {label: overrides}: each batch method is timed once per variant")
    ap.add_argument("--corpus", default=None, help="corpus file for key statistics")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    lm = load_causal_lm(args.model)
    data = args.data or default_data_dir()
    broad = load_countermoral(data, "deontology", "broad")
    results = {"model": args.model, "threads": torch.get_num_threads(), "methods": {}}
    for name in args.methods or EDITORS.names():
        context = editing_context(data, "deontology", "broad", False, corpus=args.corpus)
        editor = make_editor(name, {}, context)
        editor.apply(lm, [broad[-1]]).restore()  # warm-up: statistics, templates, embedder
        times, peaks = [], []
        for req in broad[: args.repeats]:
            with PeakRSS() as mem:
                t0 = time.perf_counter()
                handle = editor.apply(lm, [req])
                times.append(time.perf_counter() - t0)
            handle.restore()
            peaks.append(mem.delta_mib)
        row = {"median_s_per_edit": statistics.median(times), "times_s": times,
               "peak_extra_mib": max(peaks), "max_rss_mib": resource.getrusage(
                   resource.RUSAGE_SELF).ru_maxrss / 1024}
        if name in args.batch_methods and editor.supports_batch:
            reqs = []
            for fw in FRAMEWORKS:
                reqs += load_countermoral(data, fw, "broad")
            reqs = reqs[: args.batch_size]
            base = LMScorer(lm.model, lm.tokenizer)
            pres = [observe(base, r) for r in reqs]
            for variant, overrides in json.loads(args.batch_variants).items():
                batch_editor = make_editor(name, overrides, context)
                seconds, peaks = [], []
                for _ in range(args.batch_repeats):  # the edit is deterministic: same metrics each time
                    with PeakRSS() as mem:
                        t0 = time.perf_counter()
                        handle = batch_editor.apply(lm, reqs)
                        seconds.append(time.perf_counter() - t0)
                    peaks.append(mem.delta_mib)
                    scorer = handle.scoring_model()
                    rel = [entry_metrics(p, observe(scorer, r)) for p, r in zip(pres, reqs)]
                    handle.restore()
                row[f"batch_{len(reqs)}_{variant}"] = {
                    "overrides": overrides, "seconds": statistics.median(seconds), "times_s": seconds,
                    "peak_extra_mib": max(peaks),
                    **{m: statistics.mean(x[m] for x in rel) for m in
                       ("reliability", "action_paraphrase", "relation_paraphrase", "neighbourhood_score")}}
        results["methods"][name] = row
        log.info("%s: %s", name, json.dumps(row))
    return emit(results, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
