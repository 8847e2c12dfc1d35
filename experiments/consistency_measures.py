"""Every answer-graph consistency measure on the same graphs: SGE, NumSets, EigV, Degree,
Eccentricity, KLE, LexSim (mean ROUGE-L) and mean cosine, on the SaGE authors' quality100
GPT-3.5 answers.

Graphs (`--edges`, default both): the authors' own released pair similarities
(`column:cosine_model_output` of q100_gpt_3.5_edges.csv, stsb-distilroberta-base-v2 cosine, the
edges of the paper's headline) and the bundled encoder's cosine (all-MiniLM-L6-v2). For each it
writes every measure's mean with a 95% bootstrap CI, and how the measures rank the questions
alike (Spearman over questions, oriented so that higher = more consistent for every measure).
With `--labels FILE` (human pair labels in any layout `sage correlate` reads, e.g. the SaGE
authors' annotations) it adds `sage correlate`'s tables: each measure's Spearman (CI) and Pearson
with people, the edges' pair-level AUROC, and the paired test of the best measure against SGE.
The sheet that `sage data` downloads, q100_human_eval.csv, carries no labels.

    OMP_NUM_THREADS=1 python experiments/consistency_measures.py
    python experiments/consistency_measures.py --labels LABELS.csv --out experiments/results/consistency_measures_labels
    # measures on NLI edges and semantic entropy need an NLI model (not downloadable offline here):
    python experiments/consistency_measures.py --edges column:cosine_model_output,cosine,nli \\
        --nli-model microsoft/deberta-large-mnli --device cuda --out experiments/results/consistency_measures_nli

Writes table.md, questions.csv (one row per question: every measure; no texts) and summary.json
(config, library versions, git hash, seed, timings).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SAGE_SHARED_DATA", REPO.parent / "shared" / "data")) / "sage-quality100"
MEASURES = ("sge", "num_sets", "eigv", "degree", "eccentricity", "kle")
SHOWN = MEASURES[:1] + ("meansim",) + MEASURES[1:]  # meansim: the mean similarity of the edges (from sge)
BASELINES = ("rouge_l", "cosine")  # rouge_l is LM-Polygraph's LexSim (`--metrics lexsim`)
EDGE_NAMES = {"column:cosine_model_output": "stsb (authors' cosine)", "cosine": "MiniLM cosine (bundled)"}


def measure_columns(edges: list[str], with_se: bool) -> dict[str, list[str]]:
    """Per edge the questions.csv columns of every graph measure on it."""
    from sage.metrics.question_metrics import edge_column

    names = list(SHOWN) + (["se", "n_clusters"] if with_se else [])
    out = {}
    for e in edges:
        cols = [edge_column(e, edges[0], "answer", m) for m in SHOWN]
        if with_se and e in ("nli", "judge"):
            cols += [edge_column(e, next(x for x in edges if x in ("nli", "judge")), "answer", m)
                     for m in names[len(SHOWN):]]
        out[e] = cols
    return out


def oriented_spearman(frame, cols: list[str]) -> list[str]:
    """Markdown matrix of Spearman's rho over questions, every column oriented (higher = consistent);
    columns constant over questions are left out."""
    from sage.annotation.validity import oriented

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from semantic_edges import spearman_table  # the sibling experiment's matrix

    cols = [c for c in cols if c in frame.columns and frame[c].nunique() > 1]
    return spearman_table(frame.assign(**{c: oriented(c) * frame[c] for c in cols}), cols)


def against_mean_similarity(frame, cols: list[str]) -> list[str]:
    """Markdown rows: each measure's Spearman with the edges' mean similarity to 5 decimals and its
    discordant question pairs (oriented, higher = consistent; ties in either count as neither)."""
    import numpy as np
    from scipy.stats import spearmanr

    from sage.annotation.validity import oriented

    ref = next(c for c in cols if c.startswith("meansim"))
    rows = ["| measure | Spearman with meansim | discordant pairs | question pairs |", "|---|---:|---:|---:|"]
    for c in cols:
        if c == ref or c not in frame.columns or frame[c].nunique() < 2:
            continue
        ok = frame[c].notna() & frame[ref].notna()
        x, y = (oriented(c) * frame.loc[ok, c]).to_numpy(float), frame.loc[ok, ref].to_numpy(float)
        i, j = np.triu_indices(len(x), 1)
        disc = int(((x[i] - x[j]) * (y[i] - y[j]) < 0).sum())
        rows.append(f"| {c} | {spearmanr(x, y)[0]:.5f} | {disc} | {len(i)} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path, default=DATA / "q100_gpt_3.5_edges.csv",
                    help="The authors' pair-layout file (answers and their pair similarity columns).")
    ap.add_argument("--edges", default="column:cosine_model_output,cosine",
                    help="Comma-separated edge similarities (as sage score --sge-edges).")
    ap.add_argument("--labels", type=Path, default=None, help="Human pair labels (as `sage correlate` reads).")
    ap.add_argument("--embedder", default=None)
    ap.add_argument("--nli-model", default=None)
    ap.add_argument("--judge-model", default=None)
    ap.add_argument("--kle-kernel", default="heat", choices=["heat", "matern"])
    ap.add_argument("--device", default=None)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "consistency_measures")
    args = ap.parse_args(argv)

    from sage.metrics.graph_measures import GraphOptions
    from sage.metrics.similarity import SimilarityOptions
    from sage.metrics.stats import bootstrap_mean_ci
    from sage.provenance import provenance
    from sage.scoring import ScoreConfig, score_responses

    edges = [e.strip() for e in args.edges.split(",") if e.strip()]
    with_se = any(e in ("nli", "judge") for e in edges)
    config = ScoreConfig(metrics=MEASURES + BASELINES + (("se",) if with_se else ()), on=("answer",),
                         sge_edges=tuple(edges), seed=args.seed, n_boot=args.n_boot,
                         graph=GraphOptions(kle_kernel=args.kle_kernel),
                         similarity=SimilarityOptions(embedder=args.embedder, device=args.device,
                                                      nli_model=args.nli_model, judge_model=args.judge_model))
    result = score_responses(args.pairs, config, progress=True, default_model="gpt-3.5-turbo")
    q = result.questions.drop(columns=["question"], errors="ignore")  # no texts of the input data
    args.out.mkdir(parents=True, exist_ok=True)
    q.to_csv(args.out / "questions.csv", index=False)

    per_edge = measure_columns(edges, with_se)
    label = {e: EDGE_NAMES.get(e, e) for e in edges}
    lines = [f"# Answer-graph consistency measures on {args.pairs.name} ({q['question_id'].nunique()} questions, "
             "GPT-3.5 answers, 5 per question)", "",
             "Mean over questions [95% percentile bootstrap CI, "
             f"{args.n_boot} resamples, seed {args.seed}]. SGE and meansim (the mean similarity of the graph's "
             "edges) are consistencies (higher = more consistent); "
             "NumSets, EigV, Degree, Eccentricity and KLE are uncertainties (higher = less consistent). "
             f"KLE: {args.kle_kernel} kernel ({'t = 0.3' if args.kle_kernel == 'heat' else 'nu = kappa = 1'}); "
             "Eccentricity threshold 0.9; NumSets on similarity "
             "edges: similarity > 0.5 joins two answers. Definitions and references: sage/metrics/graph_measures.py.", "",
             "| measure | " + " | ".join(label[e] for e in edges) + " |", "|---|" + "---:|" * len(edges)]
    names = list(SHOWN) + (["se", "n_clusters"] if with_se else [])
    for k, name in enumerate(names):
        cells = []
        for e in edges:
            col = per_edge[e][k] if k < len(per_edge[e]) else None
            cells.append(bootstrap_mean_ci(q[col].to_numpy(float), n_boot=args.n_boot, seed=args.seed).fmt()
                         if col in q.columns else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for base, what in (("rouge_l_answer", "LexSim (mean pairwise ROUGE-L; LM-Polygraph's LexicalSimilarity)"),
                       ("cosine_answer", "mean cosine, MiniLM")):
        if base in q.columns:
            lines.append(f"| {what} (no graph) | "
                         f"{bootstrap_mean_ci(q[base].to_numpy(float), n_boot=args.n_boot, seed=args.seed).fmt()}"
                         + " |" * len(edges))
    lines += ["", "## How the measures rank the questions alike", "",
              "Spearman's rho over questions, every measure oriented so that higher = more consistent "
              "(uncertainties negated). NumSets is left out where it is constant over questions.", ""]
    for e in edges:
        lines += [f"### On {label[e]} edges", ""] + oriented_spearman(q, per_edge[e] + list(
            b + "_answer" for b in BASELINES)) + [""]
    lines += ["## Against the mean similarity, unrounded", "",
              "Spearman to 5 decimals and the number of discordant question pairs; a value of 1.00 above is "
              "rounding unless the discordant pairs are 0.", ""]
    for e in edges:
        lines += [f"### On {label[e]} edges", ""] + against_mean_similarity(q, per_edge[e]) + [""]
    if len(edges) > 1:
        from scipy.stats import spearmanr

        lines += ["### The same measure on two edges", "",
                  f"| measure | Spearman({label[edges[0]]}, {label[edges[1]]}) |", "|---|---:|"]
        for k, name in enumerate(SHOWN):
            a, b = per_edge[edges[0]][k], per_edge[edges[1]][k]
            ok = q[a].notna() & q[b].notna()
            lines.append(f"| {name} | {spearmanr(q.loc[ok, a], q.loc[ok, b])[0]:.2f} |")
        lines.append("")
    summary = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
               | {"score_config": result.summary["config"]},
               "similarities": result.summary["similarities"], "warnings": result.summary["warnings"],
               "pair_layout": result.summary.get("pair_layout"), "n_questions": int(len(q)),
               "means": {c: result.summary["models"][m]["metrics"][c] for m in result.summary["models"]
                         for c in result.summary["models"][m]["metrics"]},
               "timings_seconds": result.summary["timings_seconds"], "provenance": provenance(args.seed)}
    if args.labels:
        summary["human"] = _with_labels(args, result, q)
        lines += ["## Agreement with people", "", summary["human"].pop("markdown")]
    else:
        lines += ["## Agreement with people", "",
                  "Not in this table: the labels are not shipped. With the SaGE authors' labels (or your own), "
                  "`python experiments/consistency_measures.py --labels FILE` adds each measure's Spearman (95% CI) "
                  "and Pearson with people, the pair-level AUROC of each edge, and the paired test of the best measure "
                  "against SGE. For reference, the paper's headline is a Pearson correlation of about 0.56 between "
                  "the stsb edge similarity and the human labels over the 1,000 labelled answer pairs.", ""]
    lines += ["Measures on NLI edges (and semantic entropy) need an NLI model, which cannot be downloaded on this "
              "machine: `python experiments/consistency_measures.py --edges column:cosine_model_output,cosine,nli "
              "--nli-model microsoft/deberta-large-mnli --device cuda --out experiments/results/consistency_measures_nli`.",
              ""]
    (args.out / "table.md").write_text("\n".join(lines))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print("\n".join(lines))
    return 0


def _with_labels(args, result, q) -> dict:
    """`sage correlate`'s tables on this run, each measure beside its edges' pair-level validity."""
    from sage.annotation.validity import labels_report
    from sage.metrics.question_metrics import measure_edges

    return labels_report(args.labels, result.responses, q, result.edges, methods=("spearman", "pearson"),
                         seed=args.seed, measure_edges=measure_edges(result.summary["config"]))


if __name__ == "__main__":
    sys.exit(main())
