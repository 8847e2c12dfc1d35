"""How a request becomes prompt tokens: one rendering for every backend that tokenizes locally.

The transformers and vLLM backends both submit token ids rendered here, so the same request
reaches both models as the same tokens: chat messages through the tokenizer's chat template
(`add_generation_prompt=True`, no extra special tokens), a text prompt (already rendered by
`sage.generation.model_specs.PromptFormat`) with the tokenizer's special tokens (the BOS).
"""
from __future__ import annotations

from sage.api import GenerationRequest
from sage.errors import SageInputError
from sage.generation.backend_registry import first_token_after


class PromptTokens:
    def __init__(self, tokenizer, model_id: str):
        self.tokenizer = tokenizer
        self.model_id = model_id

    def text(self, req: GenerationRequest) -> tuple[str, bool]:
        """The prompt as text and whether the tokenizer adds special tokens to it."""
        tok = self.tokenizer
        if req.messages is None:
            return req.prompt, True
        if not getattr(tok, "chat_template", None):
            raise SageInputError(
                f"model {self.model_id!r} has no chat template; pass --prompt-format "
                "(llama2, mistral, vicuna, falcon, plain) to render prompts as text"
            )
        text = tok.apply_chat_template([{"role": r, "content": c} for r, c in req.messages], tokenize=False,
                                       add_generation_prompt=True)
        return text, False

    def ids(self, req: GenerationRequest) -> list[int]:
        text, special = self.text(req)
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def candidate_ids(self, req: GenerationRequest, prompt_ids: list[int]) -> list[int]:
        """Each candidate's first token as written right after this prompt (`first_token_after`)."""
        text, special = self.text(req)
        tok = self.tokenizer
        return [first_token_after(lambda t: tok(t, add_special_tokens=special)["input_ids"], text, c, prompt_ids)
                for c in req.params.candidates]


def eos_token_ids(tokenizer, generation_config) -> set[int]:
    """The ids that end a generation: the generation config's EOS (one or a list) and the tokenizer's."""
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    eos = eos if isinstance(eos, (list, tuple)) else [eos]
    return {int(e) for e in list(eos) + [tokenizer.eos_token_id] if e is not None}
