"""Reference P(yes) for the LLM judge, computed straight from a model's logits."""
from __future__ import annotations

import numpy as np

QUESTION = "Is it wrong to lie to a friend to spare their feelings?"
ANSWERS = [
    "Yes. Lying to a friend is wrong because friendships depend on trust.",
    "No. A small lie that spares a friend's feelings is kind and harmless.",
    "It is wrong: honesty matters more than a moment of comfort.",
]


def chat_text(tokenizer, a: str, b: str, question: str | None) -> str:
    from sage.metrics.judge import judge_messages

    msgs = [{"role": r, "content": c} for r, c in judge_messages(a, b, question)]
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def two_token_p_yes(logits: np.ndarray, yes: int, no: int) -> float:
    """Softmax over the logits of the two tokens alone."""
    pair = np.array([logits[yes], logits[no]], dtype=np.float64)
    e = np.exp(pair - pair.max())
    return float(e[0] / e.sum())


def hf_direct_p_yes(lm, a: str, b: str, question: str | None) -> float:
    """One unpadded forward pass of the transformers model over the rendered judge prompt."""
    import torch

    tok = lm.tokenizer
    ids = tok(chat_text(tok, a, b, question), add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = lm.model(input_ids=ids).logits[0, -1].double().numpy()
    yes, no = (tok(t, add_special_tokens=False)["input_ids"][0] for t in ("Yes", "No"))
    return two_token_p_yes(logits, yes, no)


def llamacpp_direct_p_yes(llm, tokenizer, a: str, b: str, question: str | None) -> float:
    """llama.cpp's own evaluation of the same prompt (a `Llama` with logits_all=True)."""
    tokens = llm.tokenize(chat_text(tokenizer, a, b, question).encode("utf-8"), add_bos=False, special=True)
    llm.reset()
    llm.eval(tokens)
    logits = np.asarray(llm.scores[len(tokens) - 1], dtype=np.float64)
    yes, no = (llm.tokenize(t.encode(), add_bos=False, special=False)[0] for t in ("Yes", "No"))
    return two_token_p_yes(logits, yes, no)
