"""CounterMoral tables for every editing method on the bundled model (paper Tables 1, 2 and 4).

Runs each method over a subset (`--subset specific`: 300 entries per framework, the paper's
Table 1; `broad`: 30, its Table 2) one edit at a time, then the batch methods with all of a
framework's entries in one edit (its Table 4), and writes `tables.md` with the published GPT2-XL
numbers side by side. Each method's `summary.json` records its hyperparameters,
seed, library versions and git hash; `entries.jsonl` has one line per entry (reruns resume).

    python experiments/countermoral_tables.py [--model NAME] [--methods rome,lora] [--batch-methods memit]
        [--limit N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALL = ("ft-l", "ft-m", "lora", "rome", "memit", "alphaedit", "ike", "serac", "serac-icl", "grace")
BATCH = ("memit", "alphaedit", "serac", "ft-m", "lora")


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--methods", default=",".join(ALL), help="comma-separated; '' for none")
    ap.add_argument("--batch-methods", default=",".join(BATCH), help="comma-separated; '' for none")
    ap.add_argument("--subset", default="broad", choices=["broad", "specific"])
    ap.add_argument("--limit", type=int, default=None, help="first N entries per framework")
    ap.add_argument("--data", default=None, help="CounterMoral directory (default: a local copy, else downloaded once into the sage cache)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--summarize-only", action="store_true",
                    help="edit nothing: summaries and tables from the entries already done (partial runs keep their counts)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "countermoral")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from sage.editing.dataset import FRAMEWORKS, default_data_dir
    from sage.editing.runner import RunConfig, run_dir, summarize
    from sage.editing.sweep import run_sweep
    from sage.editing.tables import write_tables
    from sage.errors import SageInputError
    from sage.models.causal_lm import load_causal_lm
    from sage.provenance import provenance

    data = Path(args.data) if args.data else default_data_dir()
    jobs = [(m, False) for m in _names(args.methods)] + [(m, True) for m in _names(args.batch_methods)]
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        if not args.summarize_only:
            load_causal_lm(args.model)  # loaded once per process: the sweep's local worker reuses it
        for method, batch in jobs:
            cfg = RunConfig(method=method, frameworks=FRAMEWORKS, subset=args.subset, model=args.model,
                            out=args.out, data=str(data), limit=args.limit, batch=batch, seed=args.seed)
            if args.summarize_only and not (run_dir(cfg) / "entries.jsonl").exists():
                continue  # never started: no summary claiming "0 of N"
            s = summarize(cfg) if args.summarize_only else run_sweep([cfg])[0]
            logging.info("%s%s: %d of %d entries, reliability %.3f", method, " (batch)" if batch else "",
                         s["n_entries"], s["n_expected"],
                         s["overall"].get("reliability", {}).get("mean", float("nan")))
    except SageInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.summarize_only:  # run.json records the last editing run; re-tabulating made no records
        (args.out / "run.json").write_text(json.dumps(
            {"argv": sys.argv[1:], "model": args.model, "subset": args.subset, "limit": args.limit,
             "provenance": provenance(args.seed)}, indent=2) + "\n")
    print(write_tables(args.out, data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
