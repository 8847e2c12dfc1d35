"""Semantic entropy under each clustering rule, from a run's stored directional judgments.

Reads an edges.csv written by `sage score` (or an experiment) with judge or NLI edges and
re-clusters every question from the stored directional values, without calling a model:
judge P(yes) > 0.5 is entailment (binary labels); NLI labels are the most probable of the three.
For every equivalence rule (loose, strict) and clustering rule (reference = get_semantic_ids,
first-member = Kuhn et al.'s Algorithm 1, chain = sage's earlier rule) it reports the mean
discrete semantic entropy and how many questions differ from the reference rule.

    python experiments/se_clustering_rules.py experiments/results/semantic_edges/edges.csv
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def question_labels(g, judge: str | None) -> np.ndarray:
    """n x n directional label codes (0 entailment, 1 neutral, 2 contradiction) of one question."""
    def order(k):
        p, s = k.split(".")
        return int(p[1:]), int(s[1:])

    keys = sorted(set(g["key_a"]) | set(g["key_b"]), key=order)
    pos = {k: i for i, k in enumerate(keys)}
    lab = np.zeros((len(keys), len(keys)), dtype=int)
    for r in g.itertuples():
        a, b = pos[r.key_a], pos[r.key_b]
        for i, j, side in ((a, b, "ab"), (b, a, "ba")):
            if judge:
                lab[i, j] = 0 if getattr(r, f"{judge}_p_yes_{side}") > 0.5 else 2
            else:
                probs = [getattr(r, f"nli_p_{x}_{side}") for x in ("entailment", "neutral", "contradiction")]
                lab[i, j] = int(np.argmax(probs))
    return lab


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("edges", type=Path)
    ap.add_argument("--kind", default="answer")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "se_clustering_rules")
    args = ap.parse_args(argv)

    import pandas as pd

    from sage.metrics.semantic_entropy import (
        CLUSTERING_RULES,
        EQUIVALENCE_RULES,
        cluster_ids,
        discrete_semantic_entropy,
        equivalence_matrix,
    )
    from sage.provenance import provenance

    e = pd.read_csv(args.edges, dtype={"question_id": str, "key_a": str, "key_b": str})
    if "kind" in e.columns:
        e = e[e["kind"] == args.kind]
    judges = [j for j in ("judge",) if f"{j}_p_yes_ab" in e.columns] + (["nli"] if "nli_p_entailment_ab" in e.columns else [])
    lines = [f"# Semantic entropy by clustering rule: {args.edges} ({e['question_id'].nunique()} questions)", "",
             "| edge | equivalence | clustering | mean SE | mean clusters | questions whose SE differs from reference |",
             "|---|---|---|---:|---:|---:|"]
    result = {}
    for edge in judges:
        labels = [question_labels(g, edge if edge != "nli" else None)
                  for _, g in e.groupby(["model", "question_id"], sort=False)]
        for equivalence in EQUIVALENCE_RULES:
            ses = {}
            for rule in CLUSTERING_RULES:
                ids = [cluster_ids(equivalence_matrix(lab, equivalence), rule) for lab in labels]
                ses[rule] = (np.array([discrete_semantic_entropy(i) for i in ids]),
                             np.array([i.max() + 1 for i in ids]))
            for rule, (se, k) in ses.items():
                differ = int((np.abs(se - ses["reference"][0]) > 1e-12).sum())
                result[f"{edge}/{equivalence}/{rule}"] = {"mean_se": float(se.mean()), "mean_clusters": float(k.mean()),
                                                          "questions_differing": differ}
                lines.append(f"| {edge} | {equivalence} | {rule} | {se.mean():.3f} | {k.mean():.2f} | {differ} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    (args.out / "summary.json").write_text(json.dumps({"edges": str(args.edges), "kind": args.kind, "result": result,
                                                       "provenance": provenance()}, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
