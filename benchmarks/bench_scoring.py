"""Scoring benchmark: sage's batched scoring against a per-pair reference (as the authors' scripts do).

Data: the SaGE quality100 file (500 answers, 500 RoTs, 100 questions).
- ours: `score_responses` with SGE (cosine edges), BLEU, ROUGE-L, BERTScore, cosine, on answers and RoTs.
- reference: for every pair, both texts encoded separately, `bert_score.score` called per pair
  (it builds its scorer and loads its model on every call), a ROUGE scorer built per pair, and
  SGE nodes encoded one at a time. Run on a sample of questions (it takes ~1 s per pair) and
  projected per pair to the full file; ours is timed on the same sample and on the full file.

    python benchmarks/bench_scoring.py [--repeats 3] [--sample-questions 5] [--backends torch,onnx] [--json out.json]

Ours runs once per encoder backend (torch, ONNX Runtime) in each repeat, beside the reference, so
the ratios come from one run on the same machine state; medians over the repeats.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from bench_output import emit

REPO = Path(__file__).resolve().parents[1]


def reference_scoring(groups_by_col: dict[str, list[list[str]]], embedder_path: str, device: str = "cpu") -> dict:
    from bert_score import score as bert_score_fn
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    from rouge_score import rouge_scorer
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(embedder_path, device=device)  # loaded once: generous to the reference
    out = {}
    for col, groups in groups_by_col.items():
        rows = []
        for texts in groups:
            bleu, rouge, bert, cos = [], [], [], []
            for i in range(len(texts)):
                for j in range(i + 1, len(texts)):
                    a, b = texts[i], texts[j]
                    bleu.append(sentence_bleu([a.split()], b.split(), smoothing_function=SmoothingFunction().method1))
                    rouge.append(rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(a, b)["rougeL"].fmeasure)
                    _, _, f = bert_score_fn([b], [a], model_type=embedder_path, num_layers=6, device=device)
                    bert.append(float(f[0]))
                    ea = st.encode([a], normalize_embeddings=True)[0]
                    eb = st.encode([b], normalize_embeddings=True)[0]
                    cos.append(float(ea @ eb))
            emb = np.stack([st.encode([t], normalize_embeddings=True)[0] for t in texts])
            d = np.clip(1 - emb @ emb.T, 0, None)
            np.fill_diagonal(d, 0)
            n = len(texts)
            f = d.sum(1)
            p = f / f.sum()
            sge = 1 - d.sum() / (n * (n - 1)) * float(-(p * np.log(p)).sum())
            rows.append((sge, np.mean(bleu), np.mean(rouge), np.mean(bert), np.mean(cos)))
        out[col] = rows
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None,
                    help="q100_gpt_3.5_rot.csv (default: the sage-quality100 dataset, downloaded once if absent)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-questions", type=int, default=5)
    ap.add_argument("--backends", default="torch,onnx", help="Encoder backends to time (comma-separated).")
    ap.add_argument("--device", default="cpu", help="torch device of both sides (cpu, cuda)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.data is None:
        from sage.data.download import find_dataset

        args.data = find_dataset("sage-quality100") / "q100_gpt_3.5_rot.csv"
    if not args.data.exists():
        print(f"reference data not found: {args.data}", file=sys.stderr)
        return 2

    import torch

    from sage.data.responses import read_responses
    from sage.metrics.similarity import SimilarityOptions
    from sage.models.resolve import bundled_embedder_path
    from sage.scoring import ScoreConfig, score_responses

    torch.set_num_threads(2)
    df = read_responses(args.data)
    sample_ids = df["question_id"].unique()[: args.sample_questions]
    sample = df[df["question_id"].isin(sample_ids)]
    n_pairs_full = int(sum(len(g) * (len(g) - 1) // 2 for _, g in df.groupby("question_id"))) * 2
    n_pairs_sample = int(sum(len(g) * (len(g) - 1) // 2 for _, g in sample.groupby("question_id"))) * 2

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    timed = {b: {"full": [], "sample": [], "outside": [], "outside_excl_load": []} for b in backends}
    ref_sample, sge_gap = [], []
    for _ in range(args.repeats):
        firsts = {}
        for backend in backends:
            config = ScoreConfig(similarity=SimilarityOptions(encoder_backend=backend, device=args.device))
            score_responses(sample, config, progress=False)  # models loaded (and ONNX exported) before timing
            t0 = time.perf_counter()
            res = score_responses(df, config, progress=False)
            timed[backend]["full"].append(time.perf_counter() - t0)
            firsts[backend] = res.questions
            t = res.summary["timings_seconds"]
            load = sum(v for k, v in t.items() if k.startswith("load_"))
            timed[backend]["outside"].append((t["total"] - t["model_forward"]) / t["total"])
            timed[backend]["outside_excl_load"].append((t["total"] - load - t["model_forward"]) / (t["total"] - load))
            t0 = time.perf_counter()
            score_responses(sample, config, progress=False)
            timed[backend]["sample"].append(time.perf_counter() - t0)
        if len(firsts) > 1:
            a, b = (firsts[k] for k in backends[:2])
            sge_gap.append(float(max(np.nanmax(np.abs(a[c] - b[c])) for c in ("sge_answer", "sge_rot"))))
        groups = {c: [g[c].tolist() for _, g in sample.groupby("question_id", sort=False)] for c in ("answer", "rot")}
        t0 = time.perf_counter()
        reference_scoring(groups, str(bundled_embedder_path()), args.device)
        ref_sample.append(time.perf_counter() - t0)

    med = statistics.median
    ref_per_pair = med(ref_sample) / n_pairs_sample
    result = {
        "texts_full": int(len(df) * 2),
        "pairs_full": n_pairs_full,
        "pairs_sample": n_pairs_sample,
        "repeats": args.repeats,
        "reference_sample_s": med(ref_sample),
        "reference_per_pair_s": ref_per_pair,
        "reference_full_projected_s": ref_per_pair * n_pairs_full,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "max_abs_sge_difference_between_backends": max(sge_gap) if sge_gap else None,
    }
    for backend, t in timed.items():
        result[backend] = {
            "ours_full_s": med(t["full"]),
            "ours_sample_s": med(t["sample"]),
            "speedup_same_sample": med(ref_sample) / med(t["sample"]),
            "speedup_full_projected": ref_per_pair * n_pairs_full / med(t["full"]),
            "share_outside_forward_incl_load": med(t["outside"]),
            "share_outside_forward_excl_load": med(t["outside_excl_load"]),
        }
    return emit(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
