"""Fast generation tests with no model: registry, prompt formats, cache keys, record stores, cleaning, CLI errors."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sage.api import GenerationRequest, SamplingParams
from sage.data.questions import read_questions
from sage.data.records import RecordStore
from sage.errors import SageInputError
from sage.generation.backend_registry import (
    BACKENDS,
    BackendError,
    BackendOptions,
    build_requests,
    request_seed,
)
from sage.generation.cache import request_key
from sage.generation.factory import make_backend
from sage.generation.model_specs import MODELS, PROMPT_FORMATS, resolve_model
from sage.pipeline.paraphrase_stage import (
    normalize,
    paraphrase_messages,
    parse_candidates,
)
from sage.pipeline.stages import (
    answer_messages,
    clean_answer,
    clean_rot,
    rot_messages,
)


def test_paper_models_are_aliases_with_backend_and_format():
    for alias in ["llama2-7b", "llama2-13b", "falcon-7b", "mistral-7b", "vicuna-13b", "gpt-3.5-turbo", "gpt-4",
                  "smollm2-135m"]:
        spec = resolve_model(alias)
        assert spec.backend in BACKENDS
        assert spec.prompt_format in PROMPT_FORMATS
    assert resolve_model("gpt-4").backend == "openai"
    assert resolve_model("smollm2-135m").backend == "transformers"
    generic = resolve_model("some-org/some-model")
    assert (generic.model_id, generic.backend, generic.prompt_format) == ("some-org/some-model", "transformers", "chat")
    assert resolve_model("llama2-7b", backend="transformers").backend == "transformers"
    assert set(MODELS) >= {"llama2-7b", "gpt-4"}


def test_the_default_local_backend_is_vllm_where_it_is_installed(monkeypatch):
    """Issue 30: vLLM was faster end to end with the same greedy text, so it is the local default
    where installed; SAGE_DEFAULT_BACKEND overrides it (tests/conftest.py sets transformers)."""
    import importlib.util

    monkeypatch.delenv("SAGE_DEFAULT_BACKEND")
    installed = importlib.util.find_spec("vllm") is not None
    want = "vllm" if installed else "transformers"
    assert resolve_model("smollm2-135m").backend == want
    assert resolve_model("some-org/some-model").backend == want
    assert resolve_model("llama2-7b").backend == "vllm" and resolve_model("gpt-4").backend == "openai"
    assert resolve_model("smollm2-135m", backend="llamacpp").backend == "llamacpp"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else object())
    assert resolve_model("smollm2-135m").backend == "transformers"
    monkeypatch.setenv("SAGE_DEFAULT_BACKEND", "llamacpp")
    assert resolve_model("smollm2-135m").backend == "llamacpp"
    monkeypatch.setenv("SAGE_DEFAULT_BACKEND", "nope")
    with pytest.raises(SageInputError, match="SAGE_DEFAULT_BACKEND='nope'"):
        resolve_model("smollm2-135m")


def test_unknown_prompt_format_and_backend_are_one_line_errors():
    with pytest.raises(SageInputError, match="unknown prompt format 'nope'"):
        resolve_model("gpt-4", prompt_format="nope")
    with pytest.raises(SageInputError, match="unknown generation backend 'nope'"):
        BACKENDS.get("nope")


def test_unavailable_model_fails_fast_without_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SageInputError) as err:
        make_backend(resolve_model("my-org/not-downloaded-model"), cache_path=tmp_path / "c.sqlite")
    msg = str(err.value)
    assert "not available locally" in msg and "my-org/not-downloaded-model" in msg and "\n" not in msg


def test_vllm_missing_says_how_to_install(tmp_path, monkeypatch):
    """Through make_backend, with vLLM made absent (it is installed where CI runs)."""
    from tests.fixtures_vllm import _fake_versions, _import_raising

    _fake_versions(monkeypatch, set())
    _import_raising(monkeypatch, ImportError("No module named 'vllm'"))
    with pytest.raises(BackendError, match=r"pip install 'sage-consistency\[vllm\]'"):
        make_backend(resolve_model("smollm2-135m", backend="vllm"), cache_path=tmp_path / "c.sqlite")


def test_openai_without_key_or_url_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(BackendError, match="set OPENAI_API_KEY"):
        make_backend(resolve_model("gpt-4"), BackendOptions(), cache_path=tmp_path / "c.sqlite")


def test_prompt_formats_render_text_and_add_stops():
    msgs = (("system", "Be brief."), ("user", "Is it fair?"))
    reqs = build_requests(PROMPT_FORMATS["vicuna"], [msgs], SamplingParams(max_new_tokens=4))
    assert reqs[0].messages is None and reqs[0].prompt == "Be brief. USER: Is it fair? ASSISTANT:"
    assert "USER:" in reqs[0].params.stop
    chat = build_requests(PROMPT_FORMATS["chat"], [msgs], SamplingParams())
    assert chat[0].messages == msgs and chat[0].prompt is None
    assert PROMPT_FORMATS["llama2"].render(msgs).startswith("[INST] <<SYS>>\nBe brief.")


def test_request_key_and_seed_are_content_addressed():
    a = GenerationRequest(messages=(("user", "hi"),), params=SamplingParams(max_new_tokens=8), sample=0)
    same = GenerationRequest(messages=(("user", "hi"),), params=SamplingParams(max_new_tokens=8), sample=0)
    m = {"backend": "transformers", "model": "m", "weights": "abc"}
    assert request_key(m, a) == request_key(dict(m), same)
    assert request_seed(a) == request_seed(same)
    variants = [
        request_key({**m, "model": "other"}, a),
        request_key({**m, "backend": "llamacpp"}, a),  # same alias, another backend
        request_key({**m, "weights": "abd"}, a),  # same path, other weights
        request_key({**m, "chat_template": "t2"}, a),
        request_key(m, GenerationRequest(messages=(("user", "hi!"),), params=a.params)),
        request_key(m, GenerationRequest(messages=a.messages, params=SamplingParams(max_new_tokens=9))),
        request_key(m, GenerationRequest(messages=a.messages, params=SamplingParams(max_new_tokens=8, top_p=0.9))),
        request_key(m, GenerationRequest(messages=a.messages, params=a.params, sample=1)),
        request_key(m, GenerationRequest(prompt="hi", params=a.params)),
    ]
    assert len(set(variants + [request_key(m, a)])) == len(variants) + 1
    assert request_seed(GenerationRequest(messages=a.messages, params=a.params, sample=1)) != request_seed(a)


def test_rows_of_the_old_key_scheme_are_never_served(tmp_path):
    """A cache written by the old code (table `generations`, key = sha256 of model id + request)
    holds a row for exactly this request; the new cache must not serve it."""
    import dataclasses
    import hashlib
    import sqlite3

    from sage.api import Generation, GenerationBackend
    from sage.generation.cache import CachedBackend, GenerationCache

    req = GenerationRequest(messages=(("user", "hi"),), params=SamplingParams(max_new_tokens=4))
    old_payload = {"model": "m", "prompt": None, "messages": [["user", "hi"]],
                   "params": dataclasses.asdict(req.params), "sample": 0}
    old_key = hashlib.sha256(json.dumps(old_payload, sort_keys=True, ensure_ascii=False, default=list)
                             .encode()).hexdigest()
    db = tmp_path / "c.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE generations (key TEXT PRIMARY KEY, model TEXT NOT NULL, request TEXT NOT NULL, "
                "text TEXT NOT NULL, token_logprobs TEXT, finish_reason TEXT, created REAL NOT NULL)")
    con.execute("INSERT INTO generations VALUES (?, 'm', '{}', 'stale text', NULL, 'stop', 0)", (old_key,))
    con.commit()
    con.close()

    class Echo(GenerationBackend):  # a deterministic backend with a visible call count
        name = "echo"
        model_id = "m"

        def generate(self, requests):
            return [Generation(text="fresh " + r.messages[-1][1], finish_reason="stop") for r in requests]

    cached = CachedBackend(Echo(), GenerationCache(db))
    assert cached.generate([req])[0].text == "fresh hi" and cached.calls == 1
    assert cached.generate([req])[0].cached and cached.calls == 1


def test_record_store_drops_torn_tail_and_never_duplicates(tmp_path):
    path = tmp_path / "r.jsonl"
    store = RecordStore(path)
    store.append([{"key": "a", "v": 1}, {"key": "b", "v": 2}])
    with open(path, "ab") as fh:  # what SIGKILL in the middle of a write could leave
        fh.write(b'{"key": "c", "v"')
    again = RecordStore(path)
    assert set(again.records) == {"a", "b"}
    again.append([{"key": "c", "v": 3}])
    lines = path.read_text().splitlines()
    assert [json.loads(x)["key"] for x in lines] == ["a", "b", "c"]


def test_read_questions_demo_and_errors(tmp_path):
    demo = read_questions()
    assert 25 <= len(demo) <= 40 and demo["question_id"].is_unique
    bad = tmp_path / "q.csv"
    bad.write_text("id,text\n1,Is it fair?\n")
    with pytest.raises(SageInputError, match="no 'question' column"):
        read_questions(bad)
    with pytest.raises(SageInputError, match="not found"):
        read_questions(tmp_path / "missing.csv")
    clash = tmp_path / "c.csv"
    clash.write_text("question_id,question\nq1,A?\nq1,B?\n")
    with pytest.raises(SageInputError, match="question_id 'q1'"):
        read_questions(clash)
    noid = tmp_path / "n.jsonl"
    noid.write_text('{"question": "Is it fair?"}\n')
    assert read_questions(noid)["question_id"].tolist() == ["q0001"]


def test_output_cleaning():
    assert clean_answer("Answer: Yes, it is.\n\nSecond paragraph.") == "Yes, it is."
    assert clean_answer("  It   depends\non context. ") == "It depends on context."
    assert clean_rot('RoT: "It is wrong to steal." Because...') == "It is wrong to steal."
    assert clean_rot("Rule of Thumb: You should be honest\nmore") == "You should be honest"
    assert len(rot_messages("Q?", "A.")) == 8 and answer_messages("Q?")[0][1].startswith("Answer the following")


def test_paraphrase_parsing_and_dedup_keys():
    text = "Sure!\n1. Is lying ever okay?\n2) Can a lie be justified here?\n3. ok\n- Would lying be fine for you?"
    assert parse_candidates(text) == ["Is lying ever okay?", "Can a lie be justified here?",
                                      "Would lying be fine for you?"]
    assert normalize("Is  it OK?") == normalize("is it ok")
    msgs = paraphrase_messages("Is it fair?", 3)
    assert msgs[-1][1].endswith("Question: Is it fair?") and msgs[1][0] == "assistant"


def test_cli_unknown_backend_exits_2_with_one_line(tmp_path):
    from sage.cli.main import cli

    res = CliRunner().invoke(cli, ["generate", "answers", "--backend", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().count("\n") == 0 and "unknown generation backend 'nope'" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_record_store_compacts_a_corrupt_line_left_by_an_older_writer(tmp_path):
    path = tmp_path / "entries.jsonl"
    # An older writer appended the redone entry onto a torn line, then wrote another entry.
    path.write_bytes(b'{"uid": "a", "v": 1}\n{"uid": "b", "v"{"uid": "b", "v": 2}\n{"uid": "c", "v": 3}\n'
                     b'{"uid": "a", "v": 4}\n')
    store = RecordStore(path, key_field="uid")
    assert {k: r["v"] for k, r in store.records.items()} == {"a": 4, "c": 3}  # "b" is redone
    store.append([{"uid": "b", "v": 5}])
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert sorted(r["uid"] for r in rows) == ["a", "b", "c"]
    assert {r["uid"]: r["v"] for r in rows} == {"a": 4, "b": 5, "c": 3}


def test_the_old_out_dir_spelling_still_works_with_a_warning(tmp_path):
    """`sage generate ... --out-dir` (the old name of `--out`) is rewritten, with one warning line."""
    from fixtures_cli import run_sage

    proc = run_sage("generate", "answers", "--backend", "nope", "--out-dir", tmp_path / "old")
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --out-dir is deprecated and will be removed in sage 0.3; use --out"]
    assert proc.returncode == 2 and "unknown generation backend 'nope'" in proc.stderr  # parsed as --out
    proc = run_sage("generate", "answers", "--backend", "nope", f"--out-dir={tmp_path / 'old'}")
    assert "use --out" in proc.stderr and proc.returncode == 2
