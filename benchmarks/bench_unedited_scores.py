"""Seconds per single-edit evaluation with the unedited scores computed (a method's first run of
these entries) and read from the cache every method shares (`sage.editing.unedited_scores`).

Each of `--repeats` rounds evaluates the same `--entries` broad deontology entries twice with
`--method`, first on a fresh cache, then on the cache it filled; the result holds the median
seconds per entry of each, their ratio, and whether every non-timing column of the rows is equal.

    python benchmarks/bench_unedited_scores.py --method memit --entries 6 --repeats 2 --json /tmp/bench/u.json

Target (not asserted): a cached run saves the unedited scoring, 20-30% of a single-edit
evaluation (the profile behind the cache: 3.7 of 12.1 s per MEMIT entry, one thread).
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

from bench_output import emit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TIMING = ("edit_seconds", "group_seconds")


def main(argv=None) -> int:
    from sage.editing.dataset import default_data_dir, load_countermoral
    from sage.editing.editor_base import make_editor
    from sage.editing.runner import editing_context, evaluate
    from sage.editing.unedited_scores import UneditedScores
    from sage.models.causal_lm import load_causal_lm

    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="memit")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", default=None)
    ap.add_argument("--entries", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    lm = load_causal_lm(args.model)
    data = args.data or default_data_dir()
    reqs = load_countermoral(data, "deontology", "broad")[: args.entries]
    editor = make_editor(args.method, {}, editing_context(data, "deontology", "broad", False, method=args.method))
    editor.apply(lm, [reqs[-1]]).restore()  # warm-up: key statistics, templates
    cold, warm, equal = [], [], True
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            cache = UneditedScores(lm, Path(tmp) / "unedited.sqlite")
            first = evaluate(editor, lm, reqs, batch=False, unedited=cache)
            again = evaluate(editor, lm, reqs, batch=False, unedited=cache)
            cache.close()
        cold += [r["group_seconds"] for r in first]
        warm += [r["group_seconds"] for r in again]
        equal &= all({k: v for k, v in a.items() if k not in TIMING} == {k: v for k, v in b.items() if k not in TIMING}
                     for a, b in zip(first, again))
    result = {"model": args.model, "method": args.method, "threads": torch.get_num_threads(),
              "entries": len(reqs), "repeats": args.repeats,
              "uncached_median_s_per_entry": statistics.median(cold),
              "cached_median_s_per_entry": statistics.median(warm),
              "ratio_cached_to_uncached": statistics.median(warm) / statistics.median(cold),
              "rows_equal": equal}
    return emit(result, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
