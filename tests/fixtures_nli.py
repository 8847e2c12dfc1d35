"""A tiny 3-way NLI model with random weights, saved like a Hugging Face checkpoint."""
from __future__ import annotations

from pathlib import Path

LABEL_ORDERS = {
    "mnli": {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},  # roberta/deberta-large-mnli
    "permuted": {0: "entailment", 1: "contradiction", 2: "neutral"},
}


def make_tiny_nli(path: Path, id2label: dict[int, str], seed: int = 0) -> Path:
    """A 2-layer BERT sequence classifier on the bundled MiniLM tokenizer. A large init range makes
    the three probabilities differ clearly between pairs (a near-uniform output would test little)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from sage.models.resolve import bundled_embedder_path

    tok = AutoTokenizer.from_pretrained(str(bundled_embedder_path()))
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, num_labels=3, initializer_range=0.3,
                        id2label=dict(id2label), label2id={v: k for k, v in id2label.items()})
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path
