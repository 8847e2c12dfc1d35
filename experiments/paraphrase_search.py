"""How hard the paraphrase stage should try: accepted paraphrases per search setting.

Runs the paraphrase stage of `sage score` on the built-in 30 demo questions (K = 5, ParaScore
>= 0.8, the bundled SmolLM2-135M as paraphraser) under several search settings and reports the
paraphrases kept, the questions left short of K or with none, the candidates generated and the
wall time. Each setting has its own output directory and generation cache.

    python experiments/paraphrase_search.py [--questions FILE] [--k 5] [--out DIR]

Writes table.md and results.json (settings, numbers, versions, git hash) under --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# name -> (requests per round, temperature step, rounds, max temperature)
SETTINGS = {
    "previous default (1 request of K per round, T 0.7, 3 rounds)": (1, 0.0, 3, 0.7),
    "current default (2 requests of K per round, T 0.7 +0.1 per round to 1.0, 4 rounds)": (2, 0.1, 4, 1.0),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", default=None, help="Questions file (default: the built-in demo set).")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "paraphrase_search")
    args = ap.parse_args(argv)

    import torch

    from sage.pipeline.paraphrase_stage import ParaphraseConfig
    from sage.pipeline import PipelineConfig, generate_paraphrases
    from sage.provenance import provenance

    torch.set_num_threads(args.threads)
    assert ParaphraseConfig().max_temperature == 1.0  # the table's "current default" row
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for i, (name, (requests, step, rounds, _)) in enumerate(SETTINGS.items()):
        work = args.out / f"work{i}"
        t0 = time.perf_counter()
        cfg = PipelineConfig.flat(k=args.k, questions=args.questions, out_dir=str(work), cache_path=str(work / "c.sqlite"),
                             device="cpu", paraphrase_requests=requests, paraphrase_temperature_step=step,
                             paraphrase_attempts=rounds)
        _, candidates, report = generate_paraphrases(cfg)
        results.append({"setting": name, "requests_per_round": requests, "temperature_step": step, "rounds": rounds,
                        "kept": int(candidates["kept"].sum()), "wanted": args.k * report["n_questions"],
                        "short_of_k": len(report["short_of_k"]), "no_paraphrase": report["no_paraphrase"],
                        "candidates": report["candidates"], "seconds": round(time.perf_counter() - t0, 1)})
    lines = ["| Setting | Kept | Questions short of K | With none | Candidates | Wall s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['setting']} | {r['kept']} / {r['wanted']} | {r['short_of_k']} | {len(r['no_paraphrase'])} "
                     f"| {r['candidates']} | {r['seconds']} |")
    text = ("# Paraphrase search settings\n\nBundled SmolLM2-135M paraphrasing the questions, ParaScore >= 0.8 "
            f"(bundled MiniLM), K = {args.k}, seed 0, {args.threads} torch thread(s).\n\n" + "\n".join(lines) + "\n")
    (args.out / "table.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps({"results": results, "provenance": provenance(0)}, indent=2)
                                           + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
