"""CUDA-only checks (marker `gpu`, skipped without a CUDA GPU; `benchmarks/gpu_check.sh` runs them):
the vLLM backend in bfloat16 and float16, ROME / MEMIT edits on the GPU with bit-exact restore, and
the sequential CounterMoral experiment with `--device cuda`."""
from __future__ import annotations

import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.backend_registry import BackendOptions
from sage.pipeline.stages import answer_messages

pytestmark = [pytest.mark.slow, pytest.mark.gpu]

QUESTIONS = ["Is it acceptable to lie to a friend to spare their feelings?", "Hi",
             "Should you return a wallet you found on the street if it contains a lot of cash?"]


@pytest.fixture(scope="module", params=["bfloat16", "float16"])
def cuda_vllm(request):
    pytest.importorskip("vllm", reason="vLLM not installed: pip install 'sage-consistency[vllm]'")
    from sage.generation.vllm_backend import VLLMBackend

    backend = VLLMBackend("smollm2-135m", BackendOptions(dtype=request.param, kv_cache_gib=2))
    yield backend
    backend.close()


def test_vllm_on_cuda_generates_batched_as_alone_and_seeds_samples(cuda_vllm):
    assert cuda_vllm.device == "cuda" and cuda_vllm.identity()["dtype"] in ("bfloat16", "float16")
    greedy = SamplingParams(max_new_tokens=24, logprobs=True)
    reqs = [GenerationRequest(messages=answer_messages(q), params=greedy) for q in QUESTIONS]
    batched = cuda_vllm.generate(reqs)
    assert all(g.text.strip() and all(lp <= 0 for lp in g.token_logprobs) for g in batched)
    assert [cuda_vllm.generate([r])[0].text for r in reqs] == [g.text for g in batched]
    sampled = SamplingParams(max_new_tokens=16, temperature=0.9, seed=1)
    reqs = [GenerationRequest(messages=answer_messages(q), params=sampled, sample=s) for q in QUESTIONS for s in (0, 1)]
    assert [g.text for g in cuda_vllm.generate(reqs)] == [cuda_vllm.generate([r])[0].text for r in reqs]


def test_vllm_judge_on_cuda_is_close_to_the_float32_reference(cuda_vllm, bundled_lm):
    from fixtures_judge import ANSWERS, QUESTION, hf_direct_p_yes

    from sage.generation.backend_registry import build_requests
    from sage.generation.model_specs import resolve_model
    from sage.metrics.judge import judge_messages, p_yes_from_logprobs

    params = SamplingParams(max_new_tokens=1, candidates=("Yes", "No"), logprobs=True)
    reqs = build_requests(resolve_model("smollm2-135m").format, [judge_messages(ANSWERS[0], ANSWERS[1], QUESTION)],
                          params)
    lps = cuda_vllm.generate(reqs)[0].candidate_logprobs
    # half-precision kernels: within 0.05 of the float32 model's two-token softmax
    assert p_yes_from_logprobs(lps["Yes"], lps["No"]) == pytest.approx(
        hf_direct_p_yes(bundled_lm, ANSWERS[0], ANSWERS[1], QUESTION), abs=0.05)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("method", ["rome", "memit"])
def test_edits_on_cuda_work_and_restore_bit_for_bit(method, dtype, countermoral_dir):
    import torch

    from sage.editing.editor_base import EditContext, make_editor
    from sage.editing.dataset import load_countermoral
    from sage.editing.handles import state_hashes
    from sage.editing.runner import evaluate
    from sage.models.causal_lm import load_causal_lm

    lm = load_causal_lm("smollm2-135m", device="cuda", dtype=dtype)
    assert next(lm.model.parameters()).device.type == "cuda"
    reqs = load_countermoral(countermoral_dir, "deontology", "broad", 2)
    hp = {"v_steps": 12, "n_context": 2, "clamp_norm_factor": 10.0, "stats_tokens": 15360}
    if method == "memit":
        hp["layers"] = [3, 4]
    before = state_hashes(lm.model)
    rows = evaluate(make_editor(method, hp, EditContext(pool=reqs)), lm, reqs, batch=False)
    assert state_hashes(lm.model) == before
    assert next(lm.model.parameters()).dtype == getattr(torch, dtype)
    assert all(r["reliability"] > r["pre_reliability"] for r in rows), rows


def test_sequential_experiment_runs_on_cuda(countermoral_dir, tmp_path):
    """experiments/countermoral_sequential.py --device cuda: a short MEMIT sequence edits the model
    on the GPU and writes its records, checkpoint and tables like the CPU runs."""
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "experiments" / "countermoral_sequential.py"
    spec = importlib.util.spec_from_file_location("countermoral_sequential", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--device", "cuda", "--methods", "memit", "--frameworks", "deontology",
                        "--limit", "3", "--checkpoints", "3", "--data", str(countermoral_dir),
                        "--out", str(tmp_path)]) == 0
    run = tmp_path / "memit" / "specific-sequential-deontology"
    summary = json.loads((run / "summary.json").read_text())
    assert [c["step"] for c in summary["checkpoints"]] == [3]
    assert 0.0 <= summary["checkpoints"][0]["retention"] <= 1.0
    assert len((run / "edits.jsonl").read_text().splitlines()) == 3
    assert (tmp_path / "sequential.md").exists()
