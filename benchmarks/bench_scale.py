"""Scoring at the paper's size: wall time, peak memory and texts/s for 1K, 3K and 10K questions.

Each table has 10 answers per question (and a RoT per answer where asked), built from real text
but every text distinct: each answer is three sentences drawn from different answers of the SaGE
authors' GPT-3.5 and Vicuna-7B files, each RoT two sentences from their RoTs (sage encodes each
distinct text once, so repeated texts would measure nothing). The tables are Parquet; each size is
scored by `sage score` in its own process with SGE, BLEU, ROUGE-L, BERTScore and cosine, outputs
in Parquet; peak RSS is that process's maximum resident set (os.wait4). Time and memory growth
are fitted as power laws over the sizes (the exponent of questions).

    python benchmarks/bench_scale.py [--sizes 1000:rot,3000:rot,10000:rot] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_output import emit

REPO = Path(__file__).resolve().parents[1]
SOURCES = [("sage-quality100", "q100_gpt_3.5_edges.csv"), ("sage-responses", "vicuna-7b-v1.5_0.csv"),
           ("sage-responses", "vicuna-7b-v1.5_1.csv"), ("sage-responses", "vicuna-7b-v1.5_3.csv")]


def sentence_pools() -> dict[str, list[list[str]]]:
    """Per text kind, the sentences of each distinct source text (kept grouped by text)."""
    import pandas as pd

    pools: dict[str, dict[str, list[str]]] = {"answer": {}, "rot": {}}
    from sage.data.download import find_dataset

    for dataset, name in SOURCES:  # local copies, else downloaded once into the sage cache
        df = pd.read_csv(find_dataset(dataset) / name, keep_default_na=False)
        for kind, cols in (("answer", ("model_output_1", "model_output_2")), ("rot", ("rot_1", "rot_2"))):
            for col in cols:
                for text in df[col]:
                    if text not in pools[kind]:
                        sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", str(text)) if len(s.split()) >= 3]
                        if sents:
                            pools[kind][text] = sents
    return {kind: list(v.values()) for kind, v in pools.items()}


def build_table(n_questions: int, with_rots: bool, pools, path: Path, seed: int = 0) -> int:
    """A responses table of n_questions x 10 distinct answers (and RoTs); returns the text count."""
    import pandas as pd

    rng = random.Random(seed)
    seen: set[str] = set()

    def compose(kind: str, k: int) -> str:
        while True:
            texts = rng.sample(pools[kind], k)  # k different source texts
            candidate = " ".join(rng.choice(t) for t in texts)
            if candidate not in seen:
                seen.add(candidate)
                return candidate

    rows = []
    for q in range(n_questions):
        for p in range(10):
            row = {"question_id": f"q{q:05d}", "paraphrase_id": p + 1, "answer": compose("answer", 3)}
            if with_rots:
                row["rot"] = compose("rot", 2)
            rows.append(row)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return len(seen)


def score(table: Path, out: Path, threads: int, backend: str) -> tuple[float, int]:
    """(wall seconds, peak RSS in bytes) of `sage score` on the table in its own process."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TQDM_DISABLE="1")
    cmd = [sys.executable, "-m", "sage", "-q", "score", "--responses", str(table), "--out", str(out),
           "--metrics", "sge,bleu,rouge_l,bertscore,cosine", "--table-format", "parquet", "--no-progress",
           "--encoder-backend", backend]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"sage score failed on {table}: {proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000:rot,3000:rot,10000:rot",
                    help="Comma-separated QUESTIONS[:rot] (':rot' adds a RoT per answer).")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backend", default="torch", help="Encoder backend: torch or onnx.")
    ap.add_argument("--work", type=Path, default=None, help="Folder for the tables and outputs (default: a temp dir).")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from sage.provenance import provenance

    pools = sentence_pools()
    work = args.work or Path(tempfile.mkdtemp(prefix="sage-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    for spec in args.sizes.split(","):
        n, _, rot = spec.partition(":")
        n_q, with_rots = int(n), rot == "rot"
        table = work / f"responses_{n_q}{'_rot' if with_rots else ''}.parquet"
        texts = build_table(n_q, with_rots, pools, table)
        seconds, rss = score(table, work / f"out_{table.stem}", args.threads, args.backend)
        runs.append({"questions": n_q, "rots": with_rots, "texts": texts, "seconds": round(seconds, 1),
                     "peak_rss_gb": round(rss / 1e9, 3), "texts_per_s": round(texts / seconds, 1)})
        print(json.dumps(runs[-1]), flush=True)
    fits = {}
    for with_rots in (True, False):
        sub = [r for r in runs if r["rots"] == with_rots]
        if len(sub) >= 2:
            q = np.log([r["questions"] for r in sub])
            fits["with_rots" if with_rots else "answers_only"] = {
                "time_exponent": round(float(np.polyfit(q, np.log([r["seconds"] for r in sub]), 1)[0]), 3),
                "rss_exponent": round(float(np.polyfit(q, np.log([r["peak_rss_gb"] for r in sub]), 1)[0]), 3),
            }
    biggest = max(runs, key=lambda r: r["questions"])
    result = {"runs": runs, "fits": fits, "threads": args.threads, "encoder_backend": args.backend,
              "projection_50k_questions_s": round(biggest["seconds"] * 50_000 / biggest["questions"], 0),
              "provenance": provenance(0)}
    return emit(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
