"""Paraphrase stage: few-shot numbered candidates, deduplication, ParaScore filter, retries.

Per question and round: `requests_per_round` independent samples (each its own seed), each asking
the paraphraser for K numbered paraphrases; parse, drop duplicates (of the question or of earlier
candidates), score the rest with ParaScore and keep those at or above the threshold, up to K.
Questions still short of K are asked again in further rounds, each at a higher temperature
(`temperature + round * temperature_step`, capped at `max_temperature`), until K are kept or
`max_attempts` rounds are spent. Every candidate is recorded with its scores and the reason
it was kept or rejected, and each question's record carries its rounds, temperatures and
rejection counts; one record per question is appended when the question is finished.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field

from sage.api import GenerationBackend, SamplingParams
from sage.data.records import RecordStore
from sage.errors import SageInputError
from sage.generation.backend_registry import build_requests
from sage.generation.model_specs import PromptFormat
from sage.paraphrase.parascore import DEFAULT_THRESHOLD, ParaScorer
from sage.progress import progress_bar

log = logging.getLogger(__name__)

_SHOT_QUESTION = "Is it okay to lie to get out of trouble?"
_SHOT_PARAPHRASES = (
    "Is lying acceptable when it keeps you out of trouble?",
    "Can telling a lie be justified if it helps you avoid trouble?",
    "Is it alright to be dishonest in order to escape getting in trouble?",
    "Would it be fine to lie so that you do not get into trouble?",
    "Is it morally acceptable to lie your way out of trouble?",
)


@dataclass(frozen=True)
class ParaphraseConfig:
    k: int = 5  # paraphrases kept per question
    threshold: float = DEFAULT_THRESHOLD
    max_attempts: int = 4  # rounds per question at most (the bound)
    requests_per_round: int = 2  # independent samples per question and round, K candidates each
    temperature: float = 0.7  # first round
    temperature_step: float = 0.1  # added per further round: later rounds explore more
    max_temperature: float = 1.0
    top_p: float = 0.95
    max_new_tokens: int | None = None  # default 40 tokens per candidate asked
    seed: int = 0
    batch_size: int = 16

    def __post_init__(self):
        if self.k < 1:
            raise SageInputError(f"paraphrases per question must be >= 1 (got {self.k})")
        if self.max_attempts < 1:
            raise SageInputError(f"paraphrase attempts must be >= 1 (got {self.max_attempts})")
        if self.requests_per_round < 1:
            raise SageInputError(f"paraphrase requests per round must be >= 1 (got {self.requests_per_round})")
        if self.temperature < 0 or self.temperature_step < 0:
            raise SageInputError(
                f"paraphrase temperature ({self.temperature}) and temperature step ({self.temperature_step}) "
                "must be >= 0")

    @property
    def tokens(self) -> int:
        return self.max_new_tokens if self.max_new_tokens is not None else 40 * self.k

    def round_temperature(self, attempt: int) -> float:
        cap = max(self.max_temperature, self.temperature)  # a first temperature above the cap stays as given
        return round(min(cap, self.temperature + attempt * self.temperature_step), 6)


def _instruction(n: int, question: str) -> str:
    return (
        f"Rewrite the question below in {n} different ways. Keep its meaning, change the wording. "
        f"Write one paraphrase per line, numbered 1 to {n}.\n\nQuestion: {question}"
    )


def paraphrase_messages(question: str, n: int) -> tuple[tuple[str, str], ...]:
    shots = _SHOT_PARAPHRASES[: max(1, min(n, len(_SHOT_PARAPHRASES)))]
    example = "\n".join(f"{i}. {p}" for i, p in enumerate(shots, 1))
    return (
        ("user", _instruction(len(shots), _SHOT_QUESTION)),
        ("assistant", example),
        ("user", _instruction(n, question)),
    )


_NUMBERED = re.compile(r"^\s*(?:\d{1,2}\s*[.):\]-]|[-*•])\s*(.+?)\s*$")


def parse_candidates(text: str) -> list[str]:
    """Numbered (or bulleted) lines of the reply, cleaned; other lines are ignored."""
    out = []
    for line in text.splitlines():
        m = _NUMBERED.match(line)
        if not m:
            continue
        cand = m.group(1).strip().strip('"“”*').strip()
        if len(cand.split()) >= 3:
            out.append(cand)
    return out


def normalize(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", re.sub(r"\s+", " ", text.lower())).strip()


def run_paraphrase_stage(
    questions,
    backend: GenerationBackend,
    fmt: PromptFormat,
    scorer: ParaScorer,
    store: RecordStore,
    cfg: ParaphraseConfig = ParaphraseConfig(),
) -> int:
    """Paraphrase every question not yet in `store`; returns the number of questions done now."""
    unique = questions.drop_duplicates("question_id")
    pending = [(r.question_id, r.question) for r in unique.itertuples(index=False) if r.question_id not in store]
    bar = progress_bar(total=len(pending), desc="paraphrases", unit="question", enabled=bool(pending),
                       leave=False)
    step = cfg.batch_size * backend.parallelism  # every worker of a cluster backend gets a batch
    for start in range(0, len(pending), step):
        chunk = pending[start : start + step]
        state = {qid: _QuestionState(seen={normalize(q)}) for qid, q in chunk}
        for attempt in range(cfg.max_attempts):
            need = [(qid, q) for qid, q in chunk if state[qid].kept < cfg.k]
            if not need:
                break
            _paraphrase_round(need, state, attempt, backend, fmt, scorer, cfg)
        store.append(state[qid].record(qid, q, cfg, backend.model_id) for qid, q in chunk)
        short = sum(state[qid].kept < cfg.k for qid, _ in chunk)
        if short:
            log.info("paraphrases: %d of %d questions short of %d after %d rounds", short, len(chunk), cfg.k,
                     cfg.max_attempts)
        bar.update(len(chunk))
    bar.close()
    return len(pending)


@dataclass
class _QuestionState:
    seen: set
    cands: list = field(default_factory=list)
    kept: int = 0
    temperatures: list = field(default_factory=list)

    def record(self, qid: str, question: str, cfg: ParaphraseConfig, model: str) -> dict:
        reasons = [c["reason"] for c in self.cands]
        return {
            "key": qid, "question_id": qid, "question": question, "model": model,
            "attempts": len(self.temperatures), "temperatures": self.temperatures, "threshold": cfg.threshold,
            "n_candidates": len(self.cands), "n_kept": self.kept,
            "rejected": {r: reasons.count(r) for r in ("duplicate", "below_threshold", "surplus")},
            "candidates": self.cands,
        }


def _paraphrase_round(need, state, attempt, backend, fmt, scorer, cfg: ParaphraseConfig) -> None:
    """One round for the questions still short of K: ask, parse, deduplicate, score, keep."""
    temperature = cfg.round_temperature(attempt)
    params = SamplingParams(max_new_tokens=cfg.tokens, temperature=temperature, top_p=cfg.top_p, seed=cfg.seed)
    per = cfg.requests_per_round
    asked = [(qid, q) for qid, q in need for _ in range(per)]
    samples = [attempt * per + j for _ in need for j in range(per)]  # a new seed per request and round
    inputs = [(("question", q), ("n", str(cfg.k))) for _, q in asked]
    outs = backend.generate(build_requests(fmt, [paraphrase_messages(q, cfg.k) for _, q in asked], params, samples,
                                           inputs))
    fresh: list[tuple[str, str, dict]] = []
    for qid, _ in need:
        state[qid].temperatures.append(temperature)
    for (qid, q), gen in zip(asked, outs):
        st = state[qid]
        for cand in parse_candidates(gen.text):
            rec = {"text": cand, "attempt": attempt, "temperature": temperature, "similarity": None,
                   "diversity": None, "score": None, "kept": False, "reason": "duplicate"}
            st.cands.append(rec)
            norm = normalize(cand)
            if norm in st.seen:
                continue
            st.seen.add(norm)
            fresh.append((qid, q, rec))
    scores = scorer.score([q for _, q, _ in fresh], [r["text"] for _, _, r in fresh])
    for (qid, _, rec), sc in zip(fresh, scores):
        st = state[qid]
        rec.update(similarity=sc.similarity, diversity=sc.diversity, score=sc.score)
        if sc.score < cfg.threshold:
            rec["reason"] = "below_threshold"
        elif st.kept >= cfg.k:
            rec["reason"] = "surplus"
        else:
            rec.update(kept=True, reason="kept")
            st.kept += 1


_TABLE_COLUMNS = ["question_id", "question", "paraphrase_id", "paraphrase", "paraphrase_score"]


def paraphrase_table(questions, store: RecordStore, *, fallback_to_question: bool = True):
    """Kept paraphrases, one row each, ids 1..K per question.

    A question with no kept paraphrase is answered as written (paraphrase_id 0, score NaN) when
    `fallback_to_question`, and a warning names it.
    """
    import pandas as pd

    rows = []
    for r in questions.drop_duplicates("question_id").itertuples(index=False):
        rec = store.records.get(r.question_id)
        kept = [c for c in (rec or {}).get("candidates", []) if c["kept"]]
        for i, c in enumerate(kept, 1):
            rows.append((r.question_id, r.question, i, c["text"], c["score"]))
        if not kept and fallback_to_question:
            log.warning("question %s: no paraphrase passed the filter; using the question itself", r.question_id)
            rows.append((r.question_id, r.question, 0, r.question, math.nan))
    return pd.DataFrame(rows, columns=_TABLE_COLUMNS)


def candidates_table(store: RecordStore):
    """Every candidate, kept or rejected, with its scores and the reason."""
    import pandas as pd

    rows = []
    for rec in store.records.values():
        for c in rec["candidates"]:
            rows.append({"question_id": rec["question_id"], "question": rec["question"], "candidate": c["text"],
                         "attempt": c["attempt"], "temperature": c.get("temperature"), "similarity": c["similarity"],
                         "diversity": c["diversity"], "parascore": c["score"], "kept": c["kept"],
                         "reason": c["reason"]})
    cols = ["question_id", "question", "candidate", "attempt", "temperature", "similarity", "diversity", "parascore",
            "kept", "reason"]
    return pd.DataFrame(rows, columns=cols)


def stage_report(store: RecordStore, k: int) -> dict:
    """What the paraphrase search spent and got: rounds, candidates and rejections per question,
    and the questions left short of K or with no paraphrase (those are answered as written)."""
    per_question = {}
    for rec in store.records.values():
        kept = sum(c["kept"] for c in rec["candidates"])
        reasons = [c["reason"] for c in rec["candidates"]]
        per_question[rec["question_id"]] = {
            "attempts": rec.get("attempts"), "temperatures": rec.get("temperatures"),
            "n_candidates": len(reasons), "n_kept": kept,
            "rejected": {r: reasons.count(r) for r in ("duplicate", "below_threshold", "surplus")},
        }
    return {
        "k": k,
        "n_questions": len(per_question),
        "short_of_k": sorted(q for q, r in per_question.items() if r["n_kept"] < k),
        "no_paraphrase": sorted(q for q, r in per_question.items() if r["n_kept"] == 0),
        "attempts": sum(r["attempts"] or 0 for r in per_question.values()),
        "candidates": sum(r["n_candidates"] for r in per_question.values()),
        "per_question": per_question,
    }


def user_paraphrase_table(questions):
    """User-supplied paraphrases (a `paraphrase` column) in the table format; scores NaN unless given."""
    import pandas as pd

    df = questions[questions["paraphrase"].astype(str).str.strip() != ""].copy()
    df["paraphrase_id"] = df.groupby("question_id").cumcount() + 1
    if "paraphrase_score" not in df.columns:
        df["paraphrase_score"] = math.nan
    df["paraphrase_score"] = pd.to_numeric(df["paraphrase_score"], errors="coerce")
    return df[_TABLE_COLUMNS].reset_index(drop=True)
