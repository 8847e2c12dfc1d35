"""General-ability drift of an edited model: perplexity on held-out natural text, and fluency.

- Held-out text: a fixed sample (64 texts, seed 0) of the SaGE authors' Vicuna-7B answers and
  Rules of Thumb (dataset `sage-responses`) that the key statistics never read. The statistics
  read the first 100 x key-dimension tokens of those texts in their fixed shuffled order
  (`key_statistics.responses_corpus`, 153,600 tokens on the bundled model); the sample is drawn
  only from texts that start after those tokens (and 16 more), so the two are disjoint. Each text
  is cut to its first `PROMPT_WORDS + TARGET_WORDS` words.
- Perplexity: exp of the mean negative log-likelihood per token of each text's continuation after
  its first `PROMPT_WORDS` words, over the whole sample (token-weighted), scored through the
  handle's scoring model, so a wrapper's context counts (IKE's demonstrations, a router's
  decision) as it would for any input.
- Fluency: the weighted bigram/trigram entropy EasyEdit reports (`sage.metrics.fluency`, EasyEdit
  `easyeditor/evaluate/evaluate_utils.py` `n_gram_entropy`: weights 2/3 and 4/3, arithmetic mean)
  of greedy generations of `NEW_TOKENS` tokens from `FLUENCY_PROMPTS`, generated through the
  scoring model (`generation_measures.continuations`: GRACE's adapter and SERAC's routing included).
"""
from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from sage.editing.generation_measures import continuations
from sage.editing.key_statistics import CORPUS_SEPARATOR, default_stats_tokens, response_texts, responses_dir
from sage.editing.profiles import profile_for
from sage.errors import SageInputError
from sage.metrics.fluency import mean_ngram_entropy

SAMPLE_TEXTS = 64
SAMPLE_SEED = 0
PROMPT_WORDS = 8
TARGET_WORDS = 72
MARGIN_TOKENS = 16
NEW_TOKENS = 64
FLUENCY_PROMPTS = (
    "The history of", "In my opinion,", "Scientists have found that", "The best way to learn",
    "Many people believe that", "The main reason why", "Dear friend,", "According to the report,",
)


@dataclass(frozen=True)
class DriftProbe:
    """The fixed inputs drift is measured on; `measure(lm, scorer)` on each model state."""

    texts: tuple[tuple[str, str], ...]  # (prompt: first words, continuation scored)
    prompts: tuple[str, ...] = FLUENCY_PROMPTS
    new_tokens: int = NEW_TOKENS
    source: str = ""
    skipped_tokens: int = 0

    @property
    def sha256(self) -> str:
        raw = json.dumps([self.texts, self.prompts, self.new_tokens], ensure_ascii=False)
        return hashlib.sha256(raw.encode()).hexdigest()

    def describe(self) -> dict:
        return {"texts": len(self.texts), "sha256": self.sha256, "source": self.source,
                "skipped_tokens": self.skipped_tokens, "fluency_prompts": len(self.prompts),
                "new_tokens": self.new_tokens}

    def measure(self, lm: Any, scorer: Any) -> dict:
        scores = scorer.score([p for p, _ in self.texts], [t for _, t in self.texts])
        tokens = sum(len(s.argmax) for s in scores)
        nll = -sum(s.logprob for s in scores)
        out: dict = {"perplexity": math.exp(nll / tokens), "tokens": tokens, "fluency": None}
        texts = continuations(lm, scorer, self.prompts, [self.new_tokens] * len(self.prompts))
        if texts is not None:
            out["fluency"] = mean_ngram_entropy(texts)
        return out


def statistics_end(tokenizer: Any, text: str, n_tokens: int) -> int:
    """The character offset in `text` where its first `n_tokens` tokens end (tokenized as the
    key statistics tokenize the corpus: a prefix, doubled until long enough)."""
    chars = n_tokens * 8
    while True:
        enc = tokenizer(text[:chars], add_special_tokens=False, return_offsets_mapping=True)
        if len(enc.input_ids) >= n_tokens + 16 or chars >= len(text):
            break
        chars *= 2
    offsets = enc["offset_mapping"]
    return int(offsets[min(n_tokens, len(offsets)) - 1][1]) if offsets else 0


def drift_probe(lm: Any, statistics_tokens: int = 0, n_texts: int = SAMPLE_TEXTS,
                seed: int = SAMPLE_SEED, prompts: tuple[str, ...] = FLUENCY_PROMPTS) -> DriftProbe:
    """The held-out sample for `lm` (see the module docstring); `statistics_tokens`: a method's
    own statistics token count where it exceeds the default (the sample then starts after it).
    One line when the corpus is absent."""
    directory = responses_dir(download=True)
    if directory is None:
        raise SageInputError("sequential editing measures drift on held-out sage-responses texts, which were "
                             "not found; run `sage data download sage-responses` (or set SAGE_SHARED_DATA)")
    texts = response_texts(directory)
    skip = max(default_stats_tokens(lm.model, profile_for(lm.model), 0), statistics_tokens) + MARGIN_TOKENS
    end = statistics_end(lm.tokenizer, CORPUS_SEPARATOR.join(texts), skip)
    start, unread = 0, []
    for t in texts:
        if start >= end and len(t.split()) >= PROMPT_WORDS + 16:
            unread.append(t)
        start += len(t) + len(CORPUS_SEPARATOR)
    if len(unread) < n_texts:
        raise SageInputError(f"{directory}: only {len(unread)} texts lie beyond the key statistics' tokens; "
                             f"drift needs {n_texts}")
    sample = random.Random(seed).sample(unread, n_texts)
    pairs = []
    for t in sample:
        words = t.split()
        pairs.append((" ".join(words[:PROMPT_WORDS]), " ".join(words[PROMPT_WORDS:PROMPT_WORDS + TARGET_WORDS])))
    source = f"sage-responses ({len(texts)} texts, {len(unread)} after the key statistics' tokens)"
    return DriftProbe(tuple(pairs), prompts=tuple(prompts), source=source, skipped_tokens=skip)
