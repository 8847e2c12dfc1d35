"""End to end: the README's `sage score --model smollm2-135m` (the 30 demo questions: paraphrases,
ParaScore, answers, RoTs, scoring) with each generation backend, start-up included.

Each run is a fresh `sage score` process with its own empty generation cache (the dequantized model
folder is shared, as it is after a first run), so every model call is made. Runs are interleaved
(A B, A B, ...) and the median wall time per backend is reported, with the number of model calls
and the load average.

    python benchmarks/bench_score_e2e.py --backends transformers,vllm --runs 3 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(backend: str, work: Path, models: Path, extra: list[str]) -> dict:
    cache = work / "cache"
    (cache / "models").mkdir(parents=True)
    for d in models.iterdir():  # the dequantized model, shared: a first run's one-off conversion is not timed
        (cache / "models" / d.name).symlink_to(d)
    env = {**os.environ, "SAGE_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "sage", "score", "--model", "smollm2-135m", "--backend", backend,
           "--no-progress", "--out", str(work / "run"), *extra]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{backend}: sage score failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads((work / "run" / "summary.json").read_text())
    return {"seconds": seconds, "load_average": load, "model_calls": summary.get("model_calls"),
            "n_questions_scored": sum(m["n_questions_scored"] for m in summary["models"].values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="transformers,vllm")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--extra", default="", help="more `sage score` arguments, space-separated")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from sage.models.causal_lm import model_dir
    from sage.provenance import provenance

    models = model_dir("smollm2-135m").parent  # dequantizes once if needed, before any timing
    backends = [b for b in args.backends.split(",") if b]
    runs: dict[str, list[dict]] = {b: [] for b in backends}
    for i in range(args.runs):
        for b in backends:
            with tempfile.TemporaryDirectory() as tmp:
                runs[b].append(_run(b, Path(tmp), models, args.extra.split()))
            r = runs[b][-1]
            print(f"run {i + 1}: {b}: {r['seconds']:.1f} s, {r['model_calls']} model calls, "
                  f"load {r['load_average']:.1f}", file=sys.stderr, flush=True)
            if args.json:  # after every run: a stopped benchmark keeps what it measured
                _write(args, runs, provenance)
    med = {b: statistics.median(r["seconds"] for r in rs) for b, rs in runs.items()}
    base = backends[0]
    print(f"\n`sage score --model smollm2-135m` on the 30 demo questions, median of {args.runs} interleaved runs\n")
    print("| backend | wall time (median) | vs " + base + " | runs (s) | model calls |")
    print("|---|---:|---:|---|---:|")
    for b, rs in runs.items():
        seconds = ", ".join(f"{r['seconds']:.0f}" for r in rs)
        print(f"| {b} | {med[b]:.1f} s | {med[b] / med[base]:.2f}x | {seconds} | {rs[0]['model_calls']} |")
    if args.json:
        _write(args, runs, provenance)
    return 0


def _write(args, runs: dict, provenance) -> None:
    done = {b: rs for b, rs in runs.items() if rs}
    med = {b: statistics.median(r["seconds"] for r in rs) for b, rs in done.items()}
    args.json.write_text(json.dumps({"args": {**vars(args), "json": str(args.json)}, "runs": runs,
                                     "median_seconds": med, **provenance()}, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
