"""Seconds to generate an in-context edit's answers (`generation_measures.greedy_continuations`)
with the rows' shared prefix run once against full rows.

IKE conditions every query of an entry on the same demonstrations and fact: its 31 prompts per
entry (edit, 10 action and 10 relation paraphrases, 10 neighbours) share about 130 of their 150
tokens. Each of `--repeats` rounds generates every entry's continuations both ways (order
alternating between rounds) with the limits and early stop of `observe_generation`; the result
holds the median seconds per entry of each, their ratio and how many continuations are equal.

    python benchmarks/bench_generation_measures.py --entries 6 --repeats 3 --json /tmp/bench/g.json

Target (not asserted): the prompt pass of IKE's generation columns (about 21 of the 26 s that
scoring an edited specific entry took, one thread) run once per entry instead of once per query.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

from bench_output import emit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from sage.editing.dataset import default_data_dir, load_countermoral
    from sage.editing.editor_base import EditContext, make_editor
    from sage.editing.generation_measures import decided_by, entry_prompts, greedy_continuations, token_limits
    from sage.models.causal_lm import load_causal_lm

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", default=None)
    ap.add_argument("--framework", default="care_ethics")
    ap.add_argument("--entries", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    lm = load_causal_lm(args.model)
    pool = load_countermoral(args.data or default_data_dir(), args.framework, "specific")
    editor = make_editor("ike", {}, EditContext(pool=pool))
    jobs = []  # per entry: the conditioned prompts, their limits and targets, as observe_generation makes them
    for req in pool[: args.entries]:
        scorer = editor.apply(lm, [req]).scoring_model()
        rows = entry_prompts(req)
        targets = [t for _, _, t in rows]
        jobs.append((scorer.condition_prompts([p for _, p, _ in rows]), token_limits(lm.tokenizer, targets), targets))
    seconds = {True: [], False: []}
    texts = {True: [], False: []}
    for round_ in range(args.repeats):
        for share in ((True, False) if round_ % 2 == 0 else (False, True)):
            for prompts, limits, targets in jobs:
                t0 = time.perf_counter()
                out = greedy_continuations(lm, prompts, limits, share_prefix=share,
                                           decided=lambda i, text, ts=targets: i > 0 and decided_by(text, ts[i]))
                seconds[share].append(time.perf_counter() - t0)
                if round_ == 0:
                    texts[share] += out
    shared, full = statistics.median(seconds[True]), statistics.median(seconds[False])
    result = {"model": args.model, "method": "ike", "framework": args.framework, "threads": torch.get_num_threads(),
              "entries": len(jobs), "repeats": args.repeats, "prompts_per_entry": len(jobs[0][0]),
              "full_rows_median_s_per_entry": full, "shared_prefix_median_s_per_entry": shared,
              "speedup_full_over_shared": full / shared,
              "continuations_equal": sum(a == b for a, b in zip(texts[True], texts[False])),
              "continuations": len(texts[True])}
    return emit(result, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
