"""Model profiles: where the editable modules live, chosen from `config.architectures`.

A profile names module path templates (`{}` = layer index) for the MLP down-projection (the
key -> value map ROME/MEMIT edit), the transformer layers, the embedding, the final norm and the
LM head, and whether the down-projection stores its weight transposed (GPT-2's Conv1D).
Never chosen by a substring of a model name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sage.errors import SageInputError


@dataclass(frozen=True)
class ModelProfile:
    architecture: str
    layers: str  # e.g. "model.layers" (a ModuleList)
    mlp_out: str  # e.g. "model.layers.{}.mlp.down_proj"
    embedding: str
    final_norm: str
    lm_head: str
    conv1d: bool = False  # weight stored as [in, out] (GPT-2 Conv1D) instead of [out, in]
    n_layers_attr: str = "num_hidden_layers"

    def mlp_module(self, model: Any, layer: int):
        return get_module(model, self.mlp_out.format(layer))

    def layer_module(self, model: Any, layer: int):
        return get_module(model, f"{self.layers}.{layer}")

    def n_layers(self, model: Any) -> int:
        return int(getattr(model.config, self.n_layers_attr))

    def weight_kv(self, model: Any, layer: int):
        """The down-projection weight viewed as [value_dim, key_dim] (a view, not a copy)."""
        w = self.mlp_module(model, layer).weight
        return w.T if self.conv1d else w


_LLAMA = dict(layers="model.layers", mlp_out="model.layers.{}.mlp.down_proj",
              embedding="model.embed_tokens", final_norm="model.norm", lm_head="lm_head")
_GPT2 = dict(layers="transformer.h", mlp_out="transformer.h.{}.mlp.c_proj",
             embedding="transformer.wte", final_norm="transformer.ln_f", lm_head="lm_head",
             conv1d=True, n_layers_attr="n_layer")

PROFILES: dict[str, ModelProfile] = {
    arch: ModelProfile(architecture=arch, **spec)
    for arch, spec in {
        "LlamaForCausalLM": _LLAMA,
        "MistralForCausalLM": _LLAMA,
        "Qwen2ForCausalLM": _LLAMA,
        "GPT2LMHeadModel": _GPT2,
        "GPTJForCausalLM": dict(layers="transformer.h", mlp_out="transformer.h.{}.mlp.fc_out",
                                embedding="transformer.wte", final_norm="transformer.ln_f",
                                lm_head="lm_head", n_layers_attr="n_layer"),
        "FalconForCausalLM": dict(layers="transformer.h",
                                  mlp_out="transformer.h.{}.mlp.dense_4h_to_h",
                                  embedding="transformer.word_embeddings",
                                  final_norm="transformer.ln_f", lm_head="lm_head"),
        "GPTNeoXForCausalLM": dict(layers="gpt_neox.layers",
                                   mlp_out="gpt_neox.layers.{}.mlp.dense_4h_to_h",
                                   embedding="gpt_neox.embed_in", final_norm="gpt_neox.final_layer_norm",
                                   lm_head="embed_out"),
    }.items()
}


def get_module(model: Any, path: str):
    mod = model
    for part in path.split("."):
        mod = mod[int(part)] if part.isdigit() else getattr(mod, part)
    return mod


def profile_for(model: Any) -> ModelProfile:
    archs = list(getattr(model.config, "architectures", None) or [])
    if not archs:  # a model built from a config: fall back to its class name
        archs = [type(model).__name__]
    for arch in archs:
        if arch in PROFILES:
            return PROFILES[arch]
    raise SageInputError(
        f"no editing profile for architecture {archs}; supported: {', '.join(sorted(PROFILES))} "
        "(add one to sage/editing/profiles.py)"
    )
