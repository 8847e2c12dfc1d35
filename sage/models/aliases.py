"""Short names for the models the SaGE and CounterMoral papers use -> exact Hugging Face hub ids.

One table for every place that loads weights: `sage score --model`, `--paraphraser`, `--embedder`,
`sage edit --model`. The generation aliases in `sage.generation.model_specs.MODELS` take their ids from
here, so an alias means the same repository everywhere.
"""
from __future__ import annotations

HUB_IDS: dict[str, str] = {
    # Models under test in SaGE (the authors' models.txt) and their chat variants.
    "llama2-7b": "meta-llama/Llama-2-7b-chat-hf",
    "llama2-13b": "meta-llama/Llama-2-13b-chat-hf",
    "falcon-7b": "tiiuae/falcon-7b-instruct",
    "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.1",
    # The authors' released Vicuna responses (data/responses/lmsys/vicuna-7b-v1.5_*.csv).
    "vicuna-7b": "lmsys/vicuna-7b-v1.5",
    # The authors' paraphraser: library/sage/utils/generate_paraphrases.py loads lmsys/vicuna-13b-v1.3.
    "vicuna-13b": "lmsys/vicuna-13b-v1.3",
    "vicuna-13b-v1.5": "lmsys/vicuna-13b-v1.5",
    # Sentence encoders: the authors' SGE/cosine embedder and the BERTScore/ParaScore model of their code.
    "stsb-distilroberta-base-v2": "sentence-transformers/stsb-distilroberta-base-v2",
    "bert-base-uncased": "google-bert/bert-base-uncased",
}


def hub_id(name: str) -> str:
    """The hub id an alias stands for (case-insensitive), or `name` unchanged."""
    return HUB_IDS.get(name) or HUB_IDS.get(name.lower()) or name


def looks_like_hub_id(name: str) -> bool:
    """`org/name` with no path syntax: something the hub could hold."""
    parts = name.split("/")
    return (len(parts) == 2 and all(parts) and not name.startswith((".", "~"))
            and "\\" not in name and ".." not in name)
