"""The numbers the CounterMoral results README states, recomputed from the committed records.

Reads `experiments/results/countermoral/<method>/<run>/entries.jsonl` (one line per entry,
before and after the edit) and `summary.json`, and the authors' published GPT2-XL summaries
(`<data>/published-results-gpt2-xl/`, where present), and prints:

1. AlphaEdit against MEMIT, paired by entry uid: mean difference (MEMIT − AlphaEdit), entries
   higher / lower, Wilcoxon signed-rank p (scipy's default: zero differences dropped), per
   measure and run;
2. SERAC-ICL's action-paraphrase score as a multiple of ROME's and MEMIT's;
3. LoRA's paraphrase scores beside the published per-framework range;
4. the pre-edit baselines per subset (identical for every method: the same unedited model);
5. Spearman's rank correlation across methods between our relation-paraphrase means and the
   published ones, over every published method and without FT-L: MEMIT's published numbers beside
   our batch run (as in `tables.md`'s Table 4), beside its single edits, and, once all four
   frameworks' sequential runs are in, beside those: the regime the authors' code really ran
   (EasyEdit `edit()`, one request applied and scored at a time, nothing restored);
6. runs whose records lack a per-entry git hash, and summaries without torch/transformers.

    python experiments/countermoral_claims.py [--results DIR] [--data DIR]
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "experiments" / "results" / "countermoral"
FRAMEWORKS = ("care_ethics", "deontology", "utilitarianism", "virtue_ethics")
PAIRED_MEASURES = ("reliability", "action_paraphrase", "relation_paraphrase", "neighbourhood_score",
                   "neighbourhood_dlogp", "neighbourhood_success", "locality")
#: our method -> (published file, run directory whose regime the published numbers sit beside)
PUBLISHED = {"ft-l": ("ft", ""), "lora": ("lora", ""), "rome": ("rome", ""), "ike": ("ike", ""),
             "serac": ("serac", ""), "memit": ("memit", "-batch")}
PUB_KEY = {"specific": "all-actions", "broad": "broad-actions"}
PUB_COLUMN = {"reliability": "reliability", "action_paraphrase": "generalization_action_paraphrase",
              "relation_paraphrase": "generalization_relation_paraphrase"}

log = logging.getLogger("countermoral_claims")


def default_data() -> Path | None:
    path = REPO.parent / "shared" / "data" / "countermoral"
    return path if path.is_dir() else None


def load_entries(results: Path, method: str, run: str) -> dict[str, dict]:
    """uid -> record of one run (`run`: specific, broad, specific-batch, broad-batch; or
    `<subset>-sequential`: the per-edit records, measured right after each edit, of the four
    frameworks' sequential runs together, `<subset>-sequential-<framework>/edits.jsonl`)."""
    if run.endswith("-sequential"):
        paths = [Path(results) / method / f"{run}-{fw}" / "edits.jsonl" for fw in FRAMEWORKS]
    else:
        paths = [Path(results) / method / run / "entries.jsonl"]
    rows = [json.loads(line) for path in paths
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_uid = {r["uid"]: r for r in rows}
    if len(by_uid) != len(rows):
        raise ValueError(f"{method}/{run}: {len(rows) - len(by_uid)} duplicate uids")
    return by_uid


def has_sequential(results: Path, method: str, subset: str = "specific") -> bool:
    """Whether every framework's sequential run of `method` on `subset` is complete."""
    for fw in FRAMEWORKS:
        path = Path(results) / method / f"{subset}-sequential-{fw}" / "summary.json"
        if not path.exists():
            return False
        s = json.loads(path.read_text())
        if s["n_edits"] < s["n_expected"]:
            return False
    return True


def mean_of(results: Path, method: str, run: str, measure: str) -> float:
    return float(np.mean([r[measure] for r in load_entries(results, method, run).values()]))


def paired(results: Path, a: str, b: str, run: str, measures=PAIRED_MEASURES) -> list[dict]:
    """Method `a` against `b` on the entries both have in `run`, paired by uid."""
    ra, rb = load_entries(results, a, run), load_entries(results, b, run)
    uids = sorted(ra.keys() & rb.keys())
    out = []
    for m in measures:
        x = np.array([ra[u][m] for u in uids], dtype=float)
        y = np.array([rb[u][m] for u in uids], dtype=float)
        d = x - y
        p = float(stats.wilcoxon(x, y).pvalue) if np.any(d != 0) else float("nan")
        out.append({"run": run, "measure": m, "n": len(uids), a: float(x.mean()), b: float(y.mean()),
                    "diff": float(d.mean()), "higher": int(np.sum(d > 0)), "lower": int(np.sum(d < 0)),
                    "p": p})
    return out


def ratios(results: Path, subset: str = "specific", measure: str = "action_paraphrase") -> dict:
    means = {m: mean_of(results, m, subset, measure) for m in ("serac-icl", "rome", "memit")}
    return {**means, "x_rome": means["serac-icl"] / means["rome"],
            "x_memit": means["serac-icl"] / means["memit"]}


def published_means(data: Path, method: str, subset: str, measure: str) -> dict[str, float]:
    """Framework -> the authors' AGS mean for `method` (and "overall": the mean of the four,
    equal-sized, frameworks)."""
    res = json.loads((Path(data) / "published-results-gpt2-xl" / f"{PUBLISHED[method][0]}.json")
                     .read_text())["results"]
    out = {fw: float(res[fw.upper()][PUB_KEY[subset]]["edited"]["AGS"][PUB_COLUMN[measure]]["mean"])
           for fw in FRAMEWORKS}
    out["overall"] = float(np.mean([out[fw] for fw in FRAMEWORKS]))
    return out


def ours_by_framework(results: Path, method: str, run: str, measure: str) -> dict[str, float]:
    rows = list(load_entries(results, method, run).values())
    out = {fw: float(np.mean([r[measure] for r in rows if r["framework"] == fw])) for fw in FRAMEWORKS}
    out["overall"] = float(np.mean([r[measure] for r in rows]))
    return out


def ranking(results: Path, data: Path, subset: str = "specific", measure: str = "relation_paraphrase",
            exclude: tuple[str, ...] = (), single: tuple[str, ...] = (),
            sequential: tuple[str, ...] = ()) -> dict:
    """`single`: methods whose one-edit-at-a-time run stands in for the published regime's;
    `sequential`: methods whose sequential runs (each entry right after its own edit, the
    regime the authors' MEMIT evaluation ran) stand in for it."""
    methods = [m for m in PUBLISHED if m not in exclude]

    def run(m: str) -> str:
        return subset + ("-sequential" if m in sequential else "" if m in single else PUBLISHED[m][1])

    ours = [mean_of(results, m, run(m), measure) for m in methods]
    theirs = [published_means(data, m, subset, measure)["overall"] for m in methods]
    rho = stats.spearmanr(ours, theirs)
    return {"subset": subset, "methods": methods, "ours": ours, "published": theirs,
            "rho": float(rho.statistic), "p": float(rho.pvalue)}


def baselines(results: Path) -> dict[str, dict[str, float]]:
    """Pre-edit means per subset; the same for every method's records (checked)."""
    out = {}
    for subset in ("specific", "broad"):
        per_method = {}
        for d in sorted(Path(results).glob(f"*/{subset}/entries.jsonl")):
            rows = [json.loads(line) for line in d.read_text().splitlines() if line.strip()]
            per_method[d.parent.parent.name] = {k: float(np.mean([r[f"pre_{k}"] for r in rows]))
                                                for k in PUB_COLUMN}
        first = next(iter(per_method.values()))
        if any(abs(v[k] - first[k]) > 1e-9 for v in per_method.values() for k in first):
            log.warning("%s: pre-edit means differ between methods: %s", subset, per_method)
        out[subset] = first
    return out


def provenance(results: Path) -> list[dict]:
    """Per run: entries without a per-entry git hash, and whether torch/transformers versions are recorded."""
    out = []
    for path in sorted(Path(results).glob("*/*/summary.json")):
        s = json.loads(path.read_text())
        if s.get("sequential"):  # sequential runs keep edits.jsonl, one record per edit (sage/editing/sequential.py)
            continue
        rows = load_entries(results, path.parent.parent.name, path.parent.name).values()
        out.append({"run": f"{path.parent.parent.name}/{path.parent.name}", "n": len(rows),
                    "without_git": sum(1 for r in rows if not r.get("git")),
                    "summary_has_records_git": "records_git" in s,
                    "torch": s.get("versions", {}).get("torch"),
                    "transformers": s.get("versions", {}).get("transformers"),
                    "versions_note": s.get("versions_note")})
    return out


def _paired_lines(results: Path) -> list[str]:
    lines = ["## 1. MEMIT − AlphaEdit, paired by entry uid (Wilcoxon signed-rank)", "",
             "| run | measure | n | MEMIT | AlphaEdit | MEMIT − AlphaEdit | MEMIT higher / lower | p |",
             "|---|---|---|---|---|---|---|---|"]
    for run in ("specific", "broad", "specific-batch", "broad-batch"):
        log.info("pairing MEMIT and AlphaEdit on %s", run)
        for r in paired(results, "memit", "alphaedit", run):
            lines.append(f"| {run} | {r['measure']} | {r['n']} | {r['memit']:.4f} | {r['alphaedit']:.4f} | "
                         f"{r['diff']:+.4f} | {r['higher']} / {r['lower']} | {r['p']:.2g} |")
    return lines


def _lora_lines(results: Path, data: Path) -> list[str]:
    lines = ["## 3. LoRA against the published GPT2-XL numbers (one edit at a time)", ""]
    for subset in ("broad", "specific"):
        for measure in ("action_paraphrase", "relation_paraphrase"):
            o = ours_by_framework(results, "lora", subset, measure)
            p = published_means(data, "lora", subset, measure)
            per_fw = ", ".join(f"{fw} {o[fw]:.3f} vs {p[fw]:.3f}" for fw in FRAMEWORKS)
            lo, hi = min(p[fw] for fw in FRAMEWORKS), max(p[fw] for fw in FRAMEWORKS)
            lines.append(f"- {subset} {measure}: ours {o['overall']:.3f} (published {lo:.3f}-{hi:.3f}, "
                         f"mean {p['overall']:.3f}); per framework {per_fw}")
    return lines


def _ranking_lines(results: Path, data: Path) -> list[str]:
    lines = ["## 5. Relation-paraphrase ranking against the published one (Spearman)", ""]
    for subset in ("specific", "broad"):
        variants = [((), (), ()), (("ft-l",), (), ()), ((), ("memit",), ())]
        if has_sequential(results, "memit", subset):  # the regime the authors' MEMIT numbers come from
            variants += [((), (), ("memit",)), (("ft-l",), (), ("memit",))]
        for exclude, single, sequential in variants:
            r = ranking(results, data, subset, exclude=exclude, single=single, sequential=sequential)
            pairs = ", ".join(f"{m} {o:.3f}/{t:.3f}" for m, o, t in zip(r["methods"], r["ours"], r["published"]))
            label = (" without FT-L" if exclude else "") + (" with MEMIT's single edits" if single else "") + (
                " with MEMIT's sequential runs (the authors' regime)" if sequential else "")
            lines.append(f"- {subset}{label}: rho {r['rho']:.3f} "
                         f"(p {r['p']:.2f}, {len(r['methods'])} methods; ours/published: {pairs})")
    return lines


def report(results: Path, data: Path | None) -> str:
    has_published = data is not None and (Path(data) / "published-results-gpt2-xl").is_dir()
    skipped = ["(skipped: no published-results-gpt2-xl/ under --data)"]
    q = ratios(results)
    lines = ["# CounterMoral claims, recomputed from the records", ""] + _paired_lines(results)
    lines += ["", "## 2. SERAC-ICL's action paraphrase (specific, one edit at a time)", "",
              (f"SERAC-ICL {q['serac-icl']:.3f}, ROME {q['rome']:.3f}, MEMIT {q['memit']:.3f}: "
               f"{q['x_rome']:.2f}x ROME's, {q['x_memit']:.2f}x MEMIT's"), ""]
    lines += _lora_lines(results, data) if has_published else ["## 3. LoRA", ""] + skipped
    lines += ["", "## 4. Pre-edit baselines (every method's records)", ""]
    lines += [f"- {subset}: reliability {v['reliability']:.4f}, action {v['action_paraphrase']:.4f}, "
              f"relation {v['relation_paraphrase']:.4f}" for subset, v in baselines(results).items()]
    lines += [""] + (_ranking_lines(results, data) if has_published else ["## 5. Ranking", ""] + skipped)
    lines += ["", "## 6. Provenance per run", "",
              "| run | entries | without per-entry git | summary has records_git | torch | transformers | versions_note |",
              "|---|---|---|---|---|---|---|"]
    for r in provenance(results):
        lines.append(f"| {r['run']} | {r['n']} | {r['without_git']} | {r['summary_has_records_git']} | "
                     f"{r['torch']} | {r['transformers']} | {'yes' if r['versions_note'] else ''} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--data", type=Path, default=None,
                    help="CounterMoral folder holding published-results-gpt2-xl/ (default: ../shared/data/countermoral)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    print(report(args.results, args.data or default_data()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
