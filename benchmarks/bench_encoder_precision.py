"""What reduced precision would buy the sentence encoder, and what it costs SGE (issue 15).

Scoring is ~94% the encoder's forward passes (bench_scoring.py), so the >= 100x target against
the per-pair reference needs a faster encoder. This measures the bundled all-MiniLM-L6-v2 on the
1,000 quality100 texts (500 answers, 500 RoTs) in float32 (sage's default), bfloat16 weights and
activations (this CPU's AVX-512 BF16) and dynamic int8 quantisation of the Linear layers (torch
`quantize_dynamic`), all in one run (median of `--repeats`), and the largest and mean difference
in per-question SGE (answers and RoTs, cosine edges) against float32. Not a sage option: neither
variant agrees with float32 to the 1e-4 that a default must keep.

    python benchmarks/bench_encoder_precision.py --repeats 3 --threads 2 --json benchmarks/results/encoder_precision.json
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from bench_output import emit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("float32", "bfloat16", "int8-dynamic")


def make_variant(base, name: str):
    import torch

    model = copy.deepcopy(base)
    if name == "bfloat16":
        model = model.to(torch.bfloat16)
    elif name == "int8-dynamic":
        model[0].model = torch.ao.quantization.quantize_dynamic(model[0].model, {torch.nn.Linear},
                                                                dtype=torch.qint8)
    return model


def per_question_sge(emb: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    from sage.metrics.sge import cosine_distances, sge_from_distances

    return np.array([sge_from_distances(cosine_distances(emb[idx])).sge for idx in groups])


def main(argv=None) -> int:
    import pandas as pd
    import torch
    from sentence_transformers import SentenceTransformer

    from sage.data.download import find_dataset
    from sage.models.resolve import bundled_embedder_path
    from sage.provenance import provenance

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None, help="q100_gpt_3.5_rot.csv (default: the sage-quality100 dataset)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    path = Path(args.data) if args.data else find_dataset("sage-quality100") / "q100_gpt_3.5_rot.csv"
    table = pd.read_csv(path)
    texts = list(table["model_output"].astype(str)) + list(table["rot"].astype(str))
    qids = list(table["question_id"]) * 2
    kinds = ["answer"] * len(table) + ["rot"] * len(table)
    groups = [[i for i in range(len(texts)) if qids[i] == q and kinds[i] == k]
              for k in ("answer", "rot") for q in sorted(set(qids))]
    base = SentenceTransformer(str(bundled_embedder_path()), device="cpu", local_files_only=True)
    models = {name: make_variant(base, name) for name in VARIANTS}
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    sge: dict[str, np.ndarray] = {}
    for name, model in models.items():
        model.encode(texts[:args.batch_size], batch_size=args.batch_size)  # warm-up
    for _ in range(args.repeats):  # interleaved, so every variant sees the same machine state
        for name, model in models.items():
            t0 = time.perf_counter()
            out = model.encode(texts, batch_size=args.batch_size, convert_to_tensor=True)
            times[name].append(time.perf_counter() - t0)
            emb = out.float().numpy()
            sge[name] = per_question_sge(emb / np.linalg.norm(emb, axis=1, keepdims=True), groups)
    ref = statistics.median(times["float32"])
    rows = {}
    for name in VARIANTS:
        diff = np.abs(sge[name] - sge["float32"])
        rows[name] = {"median_s": statistics.median(times[name]), "times_s": times[name],
                      "speedup_vs_float32": ref / statistics.median(times[name]),
                      "max_abs_sge_diff": float(diff.max()), "mean_abs_sge_diff": float(diff.mean())}
    result = {"texts": len(texts), "questions_x_kinds": len(groups), "threads": args.threads,
              "batch_size": args.batch_size, "repeats": args.repeats, "variants": rows,
              "provenance": provenance()}
    return emit(result, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
