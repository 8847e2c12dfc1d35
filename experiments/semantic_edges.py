"""SGE with embedding, BERTScore, NLI and LLM-judge edges, and semantic entropy, side by side.

On the SaGE authors' quality100 GPT-3.5 answers (default) this scores every question with SGE over
cosine (bundled all-MiniLM-L6-v2), BERTScore and LLM-judge edges (and NLI edges with --nli-model),
semantic entropy from the judge's (and NLI's) bidirectional-entailment clusters, and the
baselines; it adds SGE over the authors' own released pair similarities (stsb-distilroberta-base-v2
cosine and bert-base-uncased BERTScore from q100_gpt_3.5_edges.csv) as references, and reports how
the metrics correlate with each other, question by question and pair by pair. With --labels
(human pair labels in any layout `sage correlate` reads) it adds the correlations with people and
the validity tables of `sage correlate`.

    python experiments/semantic_edges.py                              # bundled judge, CPU
    python experiments/semantic_edges.py --nli-model microsoft/deberta-large-mnli --device cuda \\
        --judge-model mistral-7b --judge-backend vllm --out experiments/results/semantic_edges_gpu

Writes table.md, questions.csv, edges.csv (every pair's similarities and judge/NLI values, keyed by
pair id, without the texts) and summary.json (config, versions, git hash, seed).
Judge calls go through the generation cache, so an interrupted run resumes where it stopped.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SAGE_SHARED_DATA", REPO.parent / "shared" / "data")) / "sage-quality100"
GPU_COMMAND = ("python experiments/semantic_edges.py --nli-model microsoft/deberta-large-mnli --device cuda "
               "--labels <authors' human labels> --out experiments/results/semantic_edges_nli")


def authors_reference(df, edges_file: Path, col: str = "answer"):
    """Per question: SGE and mean similarity over the authors' released pair similarities."""
    import pandas as pd

    from sage.metrics.sge import distances_from_similarity, sge_from_distances

    src = {"answer": ("model_output", "cosine_model_output", "bert_model_output")}[col]
    e = pd.read_csv(edges_file)
    e["question_id"] = e["question_id"].astype(str)
    rows = []
    for qid, g in df.groupby("question_id", sort=False):
        texts = g[col].astype(str).tolist()
        pos = {t: i for i, t in enumerate(texts)}
        row = {"model": g["model"].iloc[0], "question_id": qid}
        pairs = e[e["question_id"] == qid]
        for name, column in (("stsb", src[1]), ("bertbase", src[2])):
            s = np.eye(len(texts))
            seen = 0
            for a, b, v in zip(pairs[f"{src[0]}_1"], pairs[f"{src[0]}_2"], pairs[column]):
                if a in pos and b in pos and a != b:
                    s[pos[a], pos[b]] = s[pos[b], pos[a]] = v
                    seen += 1
            ok = seen == len(texts) * (len(texts) - 1) // 2
            res = sge_from_distances(distances_from_similarity(s, texts)) if ok else None
            row[f"sge_{name}_{col}"] = res.sge if res else np.nan
            row[f"meansim_{name}_{col}"] = res.mean_similarity if res else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def spearman_table(frame, columns: list[str]) -> list[str]:
    from scipy.stats import spearmanr

    cols = [c for c in columns if c in frame.columns and frame[c].notna().sum() >= 3]
    lines = ["| | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for a in cols:
        cells = []
        for b in cols:
            ok = frame[a].notna() & frame[b].notna()
            cells.append(f"{spearmanr(frame.loc[ok, a], frame.loc[ok, b])[0]:.2f}")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--responses", type=Path, default=DATA / "q100_gpt_3.5_rot.csv")
    ap.add_argument("--authors-edges", type=Path, default=DATA / "q100_gpt_3.5_edges.csv")
    ap.add_argument("--judge-model", default="smollm2-135m")
    ap.add_argument("--judge-backend", default="transformers")
    ap.add_argument("--nli-model", default=None, help="An NLI model in the local HF cache or a path (needs a GPU "
                                                       "for deberta-large on the full set in reasonable time).")
    ap.add_argument("--labels", type=Path, default=None, help="Human pair labels (as `sage correlate` reads).")
    ap.add_argument("--embedder", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--limit", type=int, default=0, help="First N questions only (0 = all).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "semantic_edges")
    args = ap.parse_args(argv)

    import pandas as pd

    from sage.data.responses import read_responses
    from sage.metrics.similarity import SimilarityOptions
    from sage.provenance import provenance
    from sage.scoring import ScoreConfig, score_responses

    df = read_responses(args.responses)
    if (df["model"] == "model").all():
        df["model"] = args.responses.stem
    if args.limit:
        df = df[df["question_id"].isin(df["question_id"].unique()[: args.limit])]
    edges = ["cosine", "bertscore", "judge"] + (["nli"] if args.nli_model else [])
    config = ScoreConfig(metrics=("sge", "se", "bleu", "rouge_l", "bertscore", "cosine"), on=("answer",),
                         sge_edges=tuple(edges), seed=args.seed,
                         similarity=SimilarityOptions(embedder=args.embedder, device=args.device,
                                                      nli_model=args.nli_model, judge_model=args.judge_model,
                                                      judge_backend=args.judge_backend))
    result = score_responses(df, config, source=str(args.responses), progress=True)
    q = result.questions
    if args.authors_edges.is_file():
        q = q.merge(authors_reference(df, args.authors_edges), on=["model", "question_id"], how="left")
    args.out.mkdir(parents=True, exist_ok=True)
    q.to_csv(args.out / "questions.csv", index=False)
    # Pair ids and keys only: the texts are the input data's (join with the responses to read them).
    result.edges.drop(columns=["text_a", "text_b"]).to_csv(args.out / "edges.csv", index=False)

    from sage.metrics.stats import bootstrap_mean_ci

    metric_cols = [c for c in q.columns if c.split("_")[0] in ("sge", "se", "n", "meansim", "bleu", "rouge", "bertscore",
                                                               "cosine") and c not in ("n",)]
    lines = [f"# Semantic edges: SGE by edge type and semantic entropy ({args.responses.name}, "
             f"{q['question_id'].nunique()} questions, answers)", "",
             f"Judge: {args.judge_model} ({args.judge_backend}); NLI: {args.nli_model or 'not run (no NLI model offline)'}; "
             f"embedder {args.embedder or 'all-MiniLM-L6-v2 (bundled)'}. `_stsb` and `_bertbase` columns: SGE and mean "
             "similarity over the authors' released pair similarities (stsb-distilroberta-base-v2 cosine, bert-base "
             f"BERTScore). Mean [95% bootstrap CI], seed {args.seed}.", "",
             "| metric | mean [95% CI] |", "|---|---:|"]
    for c in metric_cols:
        lines.append(f"| {c} | {bootstrap_mean_ci(q[c].to_numpy(float), seed=args.seed).fmt()} |")
    lines += ["", "## Spearman correlation between metrics over questions", ""]
    lines += spearman_table(q, ["sge_answer", "sge_bertscore_answer", "sge_judge_answer", "sge_nli_answer",
                                "sge_stsb_answer", "meansim_answer", "meansim_judge_answer", "meansim_stsb_answer",
                                "se_answer", "n_clusters_answer", "se_nli_answer", "rouge_l_answer", "bleu_answer",
                                "bertscore_answer"])
    e = result.edges
    if args.authors_edges.is_file():
        ae = pd.read_csv(args.authors_edges)
        key = {(str(r.question_id), frozenset((r.model_output_1, r.model_output_2))): r.cosine_model_output
               for r in ae.itertuples()}
        e = e.assign(stsb=[key.get((q_, frozenset((a, b))), np.nan) for q_, a, b in
                           zip(e["question_id"], e["text_a"], e["text_b"])])
    lines += ["", "## Spearman correlation between edge similarities over answer pairs", ""]
    lines += spearman_table(e, ["cosine", "bertscore", "rouge_l", "bleu", "judge", "nli", "stsb"])
    judge = {"p_yes_mean": float(np.mean(np.r_[e["judge_p_yes_ab"], e["judge_p_yes_ba"]])),
             "p_yes_sd": float(np.std(np.r_[e["judge_p_yes_ab"], e["judge_p_yes_ba"]])),
             "order_agreement_spearman": float(e[["judge_p_yes_ab", "judge_p_yes_ba"]].corr("spearman").iloc[0, 1]),
             "share_equivalent_pairs": float(e["judge_equivalent"].mean()),
             "clusters_per_question": {int(k): int(v) for k, v in q["n_clusters_answer"].value_counts().sort_index().items()}}
    lines += ["", "## The judge", "", f"P(yes) over ordered pairs: mean {judge['p_yes_mean']:.3f}, sd "
              f"{judge['p_yes_sd']:.3f}; Spearman of P(yes | a, b) with P(yes | b, a): "
              f"{judge['order_agreement_spearman']:.2f}; pairs judged equivalent both ways: "
              f"{judge['share_equivalent_pairs']:.1%}; clusters per question (count of questions): "
              f"{judge['clusters_per_question']}.", ""]
    summary = {"config": vars(args) | {"score_config": result.summary["config"]}, "judge": judge,
               "similarities": result.summary["similarities"], "warnings": result.summary["warnings"],
               "timings_seconds": result.summary["timings_seconds"], "provenance": provenance(args.seed)}
    if args.labels:
        summary["human"] = _with_labels(args, result, q)
        lines += ["## Agreement with people", "", summary["human"]["markdown"]]
    lines += ["", f"NLI variant (needs an NLI model, e.g. on a GPU machine): `{GPU_COMMAND}`", ""]
    (args.out / "table.md").write_text("\n".join(lines))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print("\n".join(lines))
    return 0


def _with_labels(args, result, q) -> dict:
    """`sage correlate`'s tables on this run."""
    from sage.annotation.validity import labels_report

    return labels_report(args.labels, result.responses, q, result.edges, seed=args.seed,
                         metrics=("sge_*", "se_*", "n_clusters_*", "meansim_*", "bleu_*", "rouge*", "bertscore_*",
                                  "cosine_*"))


if __name__ == "__main__":
    sys.exit(main())
