"""Every answer-graph consistency measure on the same graphs: SGE, NumSets, EigV, Degree,
Eccentricity, KLE, LexSim (mean ROUGE-L) and mean cosine, on the SaGE authors' released pair files:
the quality100 GPT-3.5 answers (100 questions) and Vicuna-7B-v1.5 set 0 (250 questions), 5 answers
per question.

Graphs (`--edges`, default both): the authors' own released pair similarities
(`column:cosine_model_output` of each pair file, stsb-distilroberta-base-v2 cosine, the edges of
the paper's headline) and the bundled encoder's cosine (all-MiniLM-L6-v2). For each file and edge
it writes every measure's mean with a 95% bootstrap CI, how the measures rank the questions alike
(Spearman over questions, oriented so that higher = more consistent for every measure), and each
measure's unrounded Spearman with the edges' mean similarity and its discordant question pairs.

On dense complete graphs with a fixed number of answers these measures are near-monotone in the
mean similarity. "Where the measures separate" rescores each file's authors' edges three ways
(`--cases`), with the same measures:
- `binary`: a clustered 0/1 graph, an answer pair joined (weight 1) when its similarity exceeds the
  file's median pair similarity, else 0, as a yes/no judge or an argmax-entailment NLI graph gives;
- `sparse`: the similarity kept where it exceeds that median, 0 elsewhere;
- `n_varies`: the dense edges, each question keeping a random 3, 4 or 5 of its 5 answers (seeded).

With `--labels FILE` (human pair labels in any layout `sage correlate` reads, e.g. the SaGE
authors' annotations of the quality100 answers) it adds `sage correlate`'s tables for the first
pair file: each measure's Spearman (CI) and Pearson with people, the edges' pair-level AUROC, and
the paired test of the best measure against SGE. The sheet that `sage data` downloads,
q100_human_eval.csv, carries no labels.

    OMP_NUM_THREADS=1 python experiments/consistency_measures.py
    python experiments/consistency_measures.py --render-only   # table.md again from the records
    python experiments/consistency_measures.py --labels LABELS.csv --out experiments/results/consistency_measures_labels
    # measures on NLI edges and semantic entropy need an NLI model (not downloadable offline here):
    python experiments/consistency_measures.py --edges column:cosine_model_output,cosine,nli \\
        --nli-model microsoft/deberta-large-mnli --device cuda --out experiments/results/consistency_measures_nli

Writes, per pair file, questions_<file>.csv (one row per question: every measure; no texts) and
cases_<file>.csv (one row per question: n and every measure of each case), then summary.json
(config, library versions, git hash, seed, timings, each case's threshold and answer counts, and
the Spearman / discordant-pair records) and table.md, rendered from those records alone
(`--render-only` renders it again without scoring).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SAGE_SHARED_DATA", REPO.parent / "shared" / "data"))
PAIR_FILES = (SHARED / "sage-quality100" / "q100_gpt_3.5_edges.csv", SHARED / "sage-responses" / "vicuna-7b-v1.5_0.csv")


def default_pair_files() -> list[Path]:
    """PAIR_FILES from ../shared/data (or SAGE_SHARED_DATA) when present, else from the `sage data`
    cache, downloaded (pinned, sha256-checked) when missing and online: the script runs outside this checkout."""
    from sage.data.download import ensure_dataset

    return [path if path.is_file() else ensure_dataset(path.parent.name, files=[path.name]) / path.name
            for path in PAIR_FILES]


MEASURES = ("sge", "num_sets", "eigv", "degree", "eccentricity", "kle")
SHOWN = MEASURES[:1] + ("meansim",) + MEASURES[1:]  # meansim: the mean similarity of the edges (from sge)
BASELINES = ("rouge_l", "cosine")  # rouge_l is LM-Polygraph's LexSim (`--metrics lexsim`)
EDGE_NAMES = {"column:cosine_model_output": "stsb (authors' cosine)", "cosine": "MiniLM cosine (bundled)"}
CASES = ("binary", "sparse", "n_varies")
CASE_COLUMN = "case_model_output"  # the derived pair column each case is scored over (an answer similarity)
CASE_N = (3, 4, 5)  # n_varies: answers kept per question, drawn uniformly
CASE_TEXT = {"dense": "the edges as they are (from the sections above)",
             "binary": "a clustered 0/1 graph, a pair joined when its similarity exceeds the file's median pair "
                       "similarity, as a yes/no judge or an argmax-entailment NLI graph gives",
             "sparse": "the similarity kept above that median, 0 elsewhere",
             "n_varies": "the dense edges with each question keeping a random 3, 4 or 5 of its answers"}


def model_of(path: Path) -> str:
    """The model that wrote a pair file's answers (the files carry no model column)."""
    stem = path.stem
    return "vicuna-7b-v1.5" if stem.startswith("vicuna-7b-v1.5") else "gpt-3.5-turbo" if "gpt_3.5" in stem else stem


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


def against_mean_similarity(frame, cols: list[str]) -> dict[str, dict]:
    """Each measure's Spearman with the edges' mean similarity (the column of `cols` starting with
    meansim) and its discordant question pairs, oriented (higher = consistent; a pair tied in either
    counts as neither). Measures constant over questions are left out."""
    import numpy as np
    from scipy.stats import spearmanr

    from sage.annotation.validity import oriented

    ref = next(c for c in cols if c.startswith("meansim"))
    out = {}
    for c in cols:
        if c == ref or c not in frame.columns or frame[c].nunique() < 2:
            continue
        ok = frame[c].notna() & frame[ref].notna()
        x, y = (oriented(c) * frame.loc[ok, c]).to_numpy(float), frame.loc[ok, ref].to_numpy(float)
        i, j = np.triu_indices(len(x), 1)
        prod = (x[i] - x[j]) * (y[i] - y[j])
        out[c] = {"spearman": float(spearmanr(x, y)[0]), "discordant": int((prod < 0).sum()),
                  "tied": int((prod == 0).sum()), "question_pairs": int(len(i))}
    return out


def tied_pairs(values) -> int:
    """Question pairs with equal (non-missing) values."""
    counts = values.dropna().value_counts()
    return int((counts * (counts - 1) // 2).sum())


def against_rows(record: dict[str, dict]) -> list[str]:
    rows = ["| measure | Spearman with meansim | discordant pairs | question pairs |", "|---|---:|---:|---:|"]
    return rows + [f"| {c} | {r['spearman']:.5f} | {r['discordant']} | {r['question_pairs']} |"
                   for c, r in record.items()]


def case_frames(pairs, column: str, seed: int) -> dict[str, tuple[object, dict]]:
    """Each case's pair-layout frame (the derived similarity in CASE_COLUMN) and its record."""
    import numpy as np

    s = pairs[column].astype(float)
    tau = float(s.median())
    joined = s > tau
    out = {"binary": (pairs.assign(**{CASE_COLUMN: joined.astype(float)}),
                      {"edge": f"1 if {column} > {tau:.6g} (the file's median pair similarity) else 0",
                       "threshold": tau, "pairs_joined": float(joined.mean())}),
           "sparse": (pairs.assign(**{CASE_COLUMN: s.where(joined, 0.0)}),
                      {"edge": f"{column} where > {tau:.6g} (the file's median pair similarity) else 0",
                       "threshold": tau, "pairs_kept": float(joined.mean())})}
    rng = np.random.default_rng(seed)
    node = {k: list(zip(pairs[f"paraphrased_{k}"], pairs[f"model_output_{k}"], pairs[f"rot_{k}"])) for k in (1, 2)}
    keep = np.zeros(len(pairs), bool)
    counts: dict[int, int] = {}
    for qid in sorted(pairs["question_id"].unique(), key=str):
        rows = np.flatnonzero((pairs["question_id"] == qid).to_numpy())
        nodes = list(dict.fromkeys(t for r in rows for t in (node[1][r], node[2][r])))
        n = int(rng.choice([m for m in CASE_N if m <= len(nodes)]))
        kept = {nodes[k] for k in rng.choice(len(nodes), n, replace=False)}
        keep[rows] = [node[1][r] in kept and node[2][r] in kept for r in rows]
        counts[n] = counts.get(n, 0) + 1
    out["n_varies"] = (pairs.loc[keep].assign(**{CASE_COLUMN: s[keep]}),
                       {"edge": f"{column}; each question keeps a random n of {CASE_N} of its answers (seed {seed})",
                        "questions_per_n": {str(k): counts[k] for k in sorted(counts)}})
    return out


def score_cases(path: Path, column: str, args) -> tuple:
    """One row per question: n and every measure of each case (columns `<measure>_<case>`)."""
    import pandas as pd

    from sage.metrics.graph_measures import GraphOptions
    from sage.scoring import ScoreConfig, score_responses

    pairs = pd.read_csv(path)
    frames = case_frames(pairs, column, args.seed)
    config = ScoreConfig(metrics=MEASURES, on=("answer",), sge_edges=(f"column:{CASE_COLUMN}",), seed=args.seed,
                         n_boot=args.n_boot, graph=GraphOptions(kle_kernel=args.kle_kernel))
    table, records = None, {}
    for case in args.cases:
        frame, record = frames[case]
        q = score_responses(frame, config, source=f"{path.name} ({case})", progress=False,
                            default_model=model_of(path)).questions
        q = q[["question_id", "n"] + [f"{m}_answer" for m in SHOWN]].rename(
            columns={"n": f"n_{case}"} | {f"{m}_answer": f"{m}_{case}" for m in SHOWN})
        table = q if table is None else table.merge(q, on="question_id", how="outer")
        records[case] = record
    return table, records


def _ci(values, args_like) -> str:
    from sage.metrics.stats import bootstrap_mean_ci

    return bootstrap_mean_ci(values.to_numpy(float), n_boot=args_like["n_boot"], seed=args_like["seed"]).fmt()


def render(out: Path) -> str:
    """table.md from the records in `out` (summary.json, questions_*.csv, cases_*.csv) alone."""
    import pandas as pd
    from scipy.stats import spearmanr

    summary = json.loads((out / "summary.json").read_text())
    cfg = summary["config"]
    edges = [e.strip() for e in cfg["edges"].split(",") if e.strip()]
    with_se = any(e in ("nli", "judge") for e in edges)
    per_edge = measure_columns(edges, with_se)
    label = {e: EDGE_NAMES.get(e, e) for e in edges}
    names = list(SHOWN) + (["se", "n_clusters"] if with_se else [])
    lines = ["# Answer-graph consistency measures on the SaGE authors' pair files", "",
             "Mean over questions [95% percentile bootstrap CI, "
             f"{cfg['n_boot']} resamples, seed {cfg['seed']}]. SGE and meansim (the mean similarity of the graph's "
             "edges) are consistencies (higher = more consistent); "
             "NumSets, EigV, Degree, Eccentricity and KLE are uncertainties (higher = less consistent). "
             f"KLE: {cfg['kle_kernel']} kernel ("
             + ("t = 0.3, LM-Polygraph's default; the official code uses 0.4 and the paper searches 0.1-0.7"
                if cfg["kle_kernel"] == "heat" else "nu = kappa = 1") + "); "
             "Eccentricity threshold 0.9; NumSets on similarity "
             "edges: similarity > 0.5 joins two answers. Definitions and references: sage/metrics/graph_measures.py. "
             "Rendered from summary.json, questions_*.csv and cases_*.csv by "
             "`python experiments/consistency_measures.py --render-only`.", ""]
    for key, ds in summary["datasets"].items():
        q = pd.read_csv(out / f"questions_{key}.csv")
        lines += [f"## {ds['model']} answers: {ds['file']} ({ds['n_questions']} questions, "
                  f"{'/'.join(str(n) for n in sorted(q['n'].unique()))} answers per question)", "",
                  "| measure | " + " | ".join(label[e] for e in edges) + " |", "|---|" + "---:|" * len(edges)]
        for k, name in enumerate(names):
            cells = []
            for e in edges:
                col = per_edge[e][k] if k < len(per_edge[e]) else None
                cells.append(_ci(q[col], cfg) if col in q.columns else "")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for base, what in (("rouge_l_answer", "LexSim (mean pairwise ROUGE-L; LM-Polygraph's LexicalSimilarity)"),
                           ("cosine_answer", "mean cosine, MiniLM")):
            if base in q.columns:
                lines.append(f"| {what} (no graph) | {_ci(q[base], cfg)}" + " |" * len(edges))
        lines += ["", "### How the measures rank the questions alike", "",
                  "Spearman's rho over questions, every measure oriented so that higher = more consistent "
                  "(uncertainties negated). NumSets is left out where it is constant over questions.", ""]
        for e in edges:
            lines += [f"#### On {label[e]} edges", ""] + oriented_spearman(q, per_edge[e] + list(
                b + "_answer" for b in BASELINES)) + [""]
        lines += ["### Against the mean similarity, unrounded", "",
                  "Spearman to 5 decimals and the number of discordant question pairs; a value of 1.00 above is "
                  "rounding unless the discordant pairs are 0.", ""]
        for e in edges:
            lines += [f"#### On {label[e]} edges", ""] + against_rows(summary["against_meansim"][key][e]) + [""]
        if len(edges) > 1:
            lines += ["### The same measure on two edges", "",
                      f"| measure | Spearman({label[edges[0]]}, {label[edges[1]]}) |", "|---|---:|"]
            for k, name in enumerate(SHOWN):
                a, b = per_edge[edges[0]][k], per_edge[edges[1]][k]
                ok = q[a].notna() & q[b].notna()
                lines.append(f"| {name} | {spearmanr(q.loc[ok, a], q.loc[ok, b])[0]:.2f} |")
            lines.append("")
    if summary.get("cases"):
        run = next(iter(summary["cases"].values()))["records"]
        lines += ["## Where the measures separate", "",
                  "Each file's authors' edges (`" + cfg["case_edge"] + "`) rescored with the same measures. "
                  + " ".join(f"`{c}`: {CASE_TEXT[c]}." for c in ("dense", *run)) + " Cells: Spearman with that "
                  "graph's own mean similarity (meansim), to 5 decimals, and the discordant question pairs in "
                  "parentheses (a pair tied in either counts as neither).", ""]
        for key, ds in summary["datasets"].items():
            cases = summary["cases"][key]
            dense = summary["against_meansim"][key][cfg["case_edge"]]
            lines += [f"### {ds['model']} ({ds['file']})", ""]
            for case, rec in cases["records"].items():
                extra = (f"{rec['pairs_joined']:.1%} of pairs joined" if "pairs_joined" in rec else
                         f"{rec['pairs_kept']:.1%} of pairs kept" if "pairs_kept" in rec else
                         "questions with n = " + ", ".join(f"{n}: {c}" for n, c in rec["questions_per_n"].items()))
                lines.append(f"- `{case}`: {rec['edge']}; {extra}.")
            lines += ["", "| measure | dense | " + " | ".join(cases["records"]) + " |",
                      "|---|---:|" + "---:|" * len(cases["records"])]
            for m in SHOWN:
                if m == "meansim":
                    continue
                d = next((r for c, r in dense.items() if c.startswith(f"{m}_")), None)
                cells = [f"{d['spearman']:.5f} ({d['discordant']})" if d else "constant"]
                for case in cases["records"]:
                    r = cases["against_meansim"][case].get(f"{m}_{case}")
                    cells.append(f"{r['spearman']:.5f} ({r['discordant']})" if r else "constant")
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
            n_pairs = next(iter(dense.values()))["question_pairs"]
            c = pd.read_csv(out / f"cases_{key}.csv")
            q = pd.read_csv(out / f"questions_{key}.csv")
            ref = next(col for col in per_edge[cfg["case_edge"]] if col.startswith("meansim"))
            ties = {"dense": tied_pairs(q[ref])} | {case: tied_pairs(c[f"meansim_{case}"]) for case in cases["records"]}
            lines += ["", f"Question pairs: {n_pairs}; of them tied in meansim (a question pair with the same "
                      "mean similarity, which no measure can order discordantly): "
                      + ", ".join(f"{case} {t}" for case, t in ties.items()) + ".", ""]
            for case in cases["records"]:
                lines += [f"#### How the measures rank the questions alike, `{case}`", ""] + oriented_spearman(
                    c, [f"{m}_{case}" for m in SHOWN]) + [""]
    if summary.get("human"):
        lines += ["## Agreement with people", "", summary["human"]["markdown"]]
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
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path, nargs="+", default=None,
                    help="The authors' pair-layout files (answers and their pair similarity columns); default: "
                         "q100_gpt_3.5_edges.csv and vicuna-7b-v1.5_0.csv (default_pair_files).")
    ap.add_argument("--edges", default="column:cosine_model_output,cosine",
                    help="Comma-separated edge similarities (as sage score --sge-edges).")
    ap.add_argument("--cases", default=",".join(CASES),
                    help=f"Comma-separated separation cases on the first column edge ({', '.join(CASES)}; "
                         "'' for none).")
    ap.add_argument("--labels", type=Path, default=None,
                    help="Human pair labels (as `sage correlate` reads) for the first --pairs file.")
    ap.add_argument("--embedder", default=None)
    ap.add_argument("--nli-model", default=None)
    ap.add_argument("--judge-model", default=None)
    ap.add_argument("--kle-kernel", default="heat", choices=["heat", "matern"])
    ap.add_argument("--device", default=None)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "consistency_measures")
    ap.add_argument("--render-only", action="store_true", help="Write table.md from the records in --out; no scoring.")
    args = ap.parse_args(argv)
    if args.render_only:
        text = render(args.out)
        (args.out / "table.md").write_text(text)
        print(text)
        return 0
    args.pairs = args.pairs or default_pair_files()

    from sage.metrics.graph_measures import GraphOptions
    from sage.metrics.similarity import SimilarityOptions
    from sage.provenance import provenance
    from sage.scoring import ScoreConfig, score_responses

    edges = [e.strip() for e in args.edges.split(",") if e.strip()]
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    case_edge = next((e for e in edges if e.startswith("column:")), None)
    with_se = any(e in ("nli", "judge") for e in edges)
    per_edge = measure_columns(edges, with_se)
    config = ScoreConfig(metrics=MEASURES + BASELINES + (("se",) if with_se else ()), on=("answer",),
                         sge_edges=tuple(edges), seed=args.seed, n_boot=args.n_boot,
                         graph=GraphOptions(kle_kernel=args.kle_kernel),
                         similarity=SimilarityOptions(embedder=args.embedder, device=args.device,
                                                      nli_model=args.nli_model, judge_model=args.judge_model))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"config": {k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if k == "pairs" else v)
                          for k, v in vars(args).items()} | {"case_edge": case_edge, "score_config": None},
               "datasets": {}, "against_meansim": {}, "cases": {}}
    for k, path in enumerate(args.pairs):
        key = path.stem
        result = score_responses(path, config, progress=True, default_model=model_of(path))
        summary["config"]["score_config"] = result.summary["config"]
        q = result.questions.drop(columns=["question"], errors="ignore")  # no texts of the input data
        q.to_csv(args.out / f"questions_{key}.csv", index=False)
        summary["datasets"][key] = {
            "file": path.name, "model": model_of(path), "n_questions": int(len(q)),
            "similarities": result.summary["similarities"], "warnings": result.summary["warnings"],
            "pair_layout": result.summary.get("pair_layout"),
            "means": {c: result.summary["models"][m]["metrics"][c] for m in result.summary["models"]
                      for c in result.summary["models"][m]["metrics"]},
            "timings_seconds": result.summary["timings_seconds"]}
        summary["against_meansim"][key] = {e: against_mean_similarity(q, per_edge[e]) for e in edges}
        if case_edge:  # pair values the graph weights W clip to [0, 1] (Degree is the mean of W)
            import pandas as pd

            v = pd.read_csv(path, usecols=[case_edge.removeprefix("column:")]).iloc[:, 0]
            summary["datasets"][key]["clipped_pairs"] = {"column": case_edge, "below_0": int((v < 0).sum()),
                                                         "above_1": int((v > 1).sum()), "pairs": int(len(v))}
        if args.cases and case_edge:
            table, records = score_cases(path, case_edge.removeprefix("column:"), args)
            table.to_csv(args.out / f"cases_{key}.csv", index=False)
            summary["cases"][key] = {"records": records, "against_meansim": {
                c: against_mean_similarity(table, [f"{m}_{c}" for m in SHOWN]) for c in args.cases}}
        if k == 0 and args.labels:
            summary["human"] = _with_labels(args, result, q)
    summary["provenance"] = provenance(args.seed)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    text = render(args.out)
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


def _with_labels(args, result, q) -> dict:
    """`sage correlate`'s tables on this run, each measure beside its edges' pair-level validity."""
    from sage.annotation.validity import labels_report
    from sage.metrics.question_metrics import measure_edges

    return labels_report(args.labels, result.responses, q, result.edges, methods=("spearman", "pearson"),
                         seed=args.seed, measure_edges=measure_edges(result.summary["config"]))


if __name__ == "__main__":
    sys.exit(main())
