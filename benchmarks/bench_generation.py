"""Generation speed: batched `transformers` backend vs a one-prompt-at-a-time `pipeline` loop.

The baseline is how the papers' scripts generate: a `transformers.pipeline("text-generation")`
called once per prompt. Same prompts (the answer-stage prompt on demo questions), same model
(bundled SmolLM2-135M-Instruct), greedy, same max_new_tokens. The llamacpp backend on the same
prompts is the CPU reference point. Generated tokens are counted the same way for every method
(re-tokenizing the output text). Reports the median of several runs and ratios to the baseline.

    python benchmarks/bench_generation.py --prompts 32 --batch-size 32 --max-new-tokens 32 --runs 3
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _prompts(n: int):
    from sage.data.questions import read_questions
    from sage.generation.stages import answer_messages

    qs = read_questions()["question"].tolist()
    return [answer_messages(qs[i % len(qs)]) for i in range(n)]


def _count(tok, texts) -> int:
    return sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)


def bench_pipeline_loop(lm, prompts, max_new_tokens):
    from transformers import pipeline

    pipe = pipeline("text-generation", model=lm.model, tokenizer=lm.tokenizer, device="cpu")

    def run():
        outs = []
        for msgs in prompts:
            chat = [{"role": r, "content": c} for r, c in msgs]
            res = pipe(chat, max_new_tokens=max_new_tokens, do_sample=False, return_full_text=False)
            outs.append(res[0]["generated_text"])
        return outs

    return run


def bench_backend(backend, prompts, max_new_tokens):
    from sage.api import GenerationRequest, SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens)
    reqs = [GenerationRequest(messages=m, params=params) for m in prompts]
    return lambda: [g.text for g in backend.generate(reqs)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for torch and llama.cpp (default: torch's default, all cores for llama.cpp)")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    args = ap.parse_args(argv)

    import torch

    from sage.generation.base import BackendOptions
    from sage.generation.hf import TransformersBackend

    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = _prompts(args.prompts)
    batched = TransformersBackend("smollm2-135m", BackendOptions(device="cpu", batch_size=args.batch_size))
    lm = batched.lm
    methods = {
        "pipeline loop (baseline)": lambda ps: bench_pipeline_loop(lm, ps, args.max_new_tokens),
        f"transformers backend, batch {args.batch_size}": lambda ps: bench_backend(batched, ps, args.max_new_tokens),
    }
    if not args.no_llamacpp and importlib.util.find_spec("llama_cpp") is not None:
        from sage.generation.llamacpp import LlamaCppBackend

        cpp = LlamaCppBackend("smollm2-135m", BackendOptions(n_threads=args.threads))
        methods["llamacpp backend (Q4_1 GGUF)"] = lambda ps: bench_backend(cpp, ps, args.max_new_tokens)

    runs = {name: make(prompts) for name, make in methods.items()}
    for name, make in methods.items():
        make(prompts[:2])()  # warm-up on two prompts
    # Runs are interleaved (A B C, A B C, ...) so load changes on a shared machine hit all methods alike.
    rates: dict[str, list[float]] = {name: [] for name in methods}
    texts: dict[str, list[str]] = {}
    for i in range(args.runs):
        for name, run in runs.items():
            t0 = time.perf_counter()
            outs = run()
            dt = time.perf_counter() - t0
            rates[name].append(_count(lm.tokenizer, outs) / dt)
            texts[name] = outs
            print(f"run {i + 1}: {name}: {rates[name][-1]:.1f} tok/s ({dt:.1f} s)", file=sys.stderr, flush=True)
    results = {name: {"tokens_per_s_median": statistics.median(r), "runs": r} for name, r in rates.items()}

    base_name = next(iter(methods))
    base = results[base_name]["tokens_per_s_median"]
    same = sum(a.strip() == b.strip() for a, b in zip(texts[base_name], texts[list(methods)[1]]))
    print(f"\n{args.prompts} prompts, greedy, max_new_tokens={args.max_new_tokens}, "
          f"torch threads={torch.get_num_threads()}, median of {args.runs} runs\n")
    print("| method | tokens/s (median) | vs pipeline loop |")
    print("|---|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['tokens_per_s_median']:.1f} | {r['tokens_per_s_median'] / base:.2f}x |")
    print(f"\nbatched greedy text identical to the pipeline loop for {same}/{len(prompts)} prompts")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": results,
                                         "identical_to_baseline": same}, indent=2))


if __name__ == "__main__":
    main()
