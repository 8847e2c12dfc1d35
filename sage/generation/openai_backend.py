"""`openai` backend: any OpenAI-compatible endpoint through the official `openai` client.

Requests run with bounded concurrency; several base URLs share the load (request i goes to
server i mod n, and each retry moves to the next server). 429, 5xx, timeouts and dropped
connections are retried: after the server's `Retry-After` (seconds or an HTTP date; also
`retry-after-ms`) capped at `--timeout`, else with exponential backoff and jitter (retry k waits
min(30, backoff * 2**k) * U[0.5, 1.5) seconds); after the last retry the error is one clear line.
The client's own retries are off (`max_retries=0`): ours add jitter and rotate across servers.
The API key comes from OPENAI_API_KEY (local servers accept any key).

What each server reply gives:
- 401/403: the key is refused; no further request is sent (at most those already in flight) and
  the run stops with one line naming the base URL.
- 400/413/422 (a prompt over the context length, say): that prompt is refused, not the run; it
  becomes a failed answer (`Generation.error` with the server's message, empty text) and the
  other requests go on. Other 4xx stop the run with the server's message.
- 200 whose choice has null content: a failed answer too.
- Ctrl-C: requests not yet sent are cancelled, the ones in flight are awaited (at most
  `--timeout`) and handed to the generation cache with everything that finished
  (`BatchInterrupted`), so a rerun resumes without asking for them again.

The cache identity (`identity()`) holds the endpoints (sorted URLs) and, per endpoint, what the
server's `GET /models` says of the model (`MODEL_CARD_FIELDS`: id, owned_by, vLLM's root and
parent, llama.cpp's meta with n_params, size, n_vocab...), never `created` (llama.cpp and vLLM
report the time of the request there). So the same model name on another server, or a server
whose model card changed, never gets another model's cached answers.

Candidate log-probabilities (`SamplingParams.candidates`) are read from the first position's
top-k list (`top_logprobs`, k = 20 on chat, 5 on completions as the OpenAI API allows): a
candidate is the listed token whose text equals it, -inf when it is not listed.
"""
from __future__ import annotations

import email.utils
import logging
import math
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import timezone
from typing import Iterator, Sequence

from sage.api import Generation, GenerationRequest, StreamingBackend
from sage.generation.backend_registry import (
    BACKENDS,
    BackendError,
    BackendOptions,
    BatchInterrupted,
    PartialBatchError,
    request_seed,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
TOP_K_CHAT, TOP_K_COMPLETION = 20, 5
AUTH_STATUSES = (401, 403)  # the key is refused: every request would be
PROMPT_STATUSES = (400, 413, 422)  # this prompt is refused (too long, say); the others may pass
MODEL_CARD_FIELDS = ("id", "owned_by", "root", "parent", "meta")  # what identifies the served weights
MODEL_LIST_TIMEOUT = 10.0  # seconds for GET /models (at most --timeout)


class MalformedResponse(Exception):
    """An answer that is not an OpenAI completion (HTTP 200 with a body that is not JSON, or JSON
    without choices): a proxy's or gateway's error page, say. Retried like a 5xx."""


class _Stopped(Exception):
    """A request left unsent because its batch stopped (Ctrl-C, a refused key)."""


class KeyRefused(BackendError):
    """HTTP 401/403: the batch stops at the first one."""


def _candidates(candidates, listed: dict[str, float] | None) -> dict[str, float] | None:
    if not candidates or listed is None:
        return None
    return {c: float(listed.get(c, float("-inf"))) for c in candidates}


@BACKENDS.register("openai")
class OpenAIBackend(StreamingBackend):
    name = "openai"
    distributable = False  # stays on the driver under a cluster executor

    def __init__(self, model: str, options: BackendOptions | None = None):
        import openai

        self.options = options or BackendOptions()
        self._model_id = model
        urls = tuple(self.options.base_urls) or (os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,)
        key = os.environ.get(self.options.api_key_env)
        if not key and DEFAULT_BASE_URL in urls:
            raise BackendError(
                f"model {model!r} is served by the OpenAI API, which needs a key: set {self.options.api_key_env}, "
                "or pass --base-url for another OpenAI-compatible server"
            )
        self.urls = urls
        # The client's own retries are off: ours add jitter and rotate across servers.
        self.clients = [
            openai.OpenAI(base_url=u, api_key=key or "sk-local", max_retries=0, timeout=self.options.timeout)
            for u in urls
        ]
        self._retryable = (openai.RateLimitError, openai.InternalServerError,
                           openai.APITimeoutError, openai.APIConnectionError, MalformedResponse)
        self._status_error = openai.APIStatusError
        self._probe_errors = (openai.OpenAIError, ValueError, TypeError, AttributeError, KeyError)
        self._rng = random.Random(self.options.retry_seed)
        self._identity: dict | None = None

    @property
    def model_id(self) -> str:
        return self._model_id

    def identity(self) -> dict:
        """Backend, model name, and per endpoint (sorted by URL) its URL and the server's model card."""
        if self._identity is None:
            endpoints = sorted(zip(self.urls, self.clients), key=lambda uc: uc[0].rstrip("/"))
            self._identity = {"backend": self.name, "model": self._model_id,
                              "endpoints": [{"url": u.rstrip("/"), "served": self._model_card(u, c)}
                                            for u, c in endpoints]}
        return self._identity

    def _model_card(self, url: str, client) -> dict | None:
        """What `GET /models` says of this model (`MODEL_CARD_FIELDS`); None where the server has
        no list (the URL and the model name then identify it). A server that lists one model under
        another name (llama.cpp answers any name with its one model) gives that model's card."""
        try:
            page = client.with_options(timeout=min(self.options.timeout, MODEL_LIST_TIMEOUT)).models.list()
            cards = [m.model_dump() if hasattr(m, "model_dump") else dict(m) for m in page.data]
        except self._probe_errors as exc:
            log.info("%s: no model list (%s); the generation cache keys on the URL and the model name",
                     url, _describe(exc))
            return None
        mine = [c for c in cards if c.get("id") == self._model_id] or (cards if len(cards) == 1 else [])
        if not mine:
            return None
        return {k: mine[0][k] for k in MODEL_CARD_FIELDS if mine[0].get(k) is not None}

    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        """Requests in flight at once (bounded); each is yielded as its answer arrives. Nothing is
        sent after a refused key or Ctrl-C (see the module docstring)."""
        if not requests:
            return
        workers = max(1, min(self.options.concurrency, len(requests)))
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sage-openai")
        futures: dict = {}
        done: dict[int, Generation] = {}
        first_error = None
        try:
            for i, r in enumerate(requests):  # inside the try: a Ctrl-C while submitting stops the sent ones too
                futures[pool.submit(self._with_retries, i, r, stop)] = i
            for f in as_completed(futures):
                try:
                    gen = f.result()
                except _Stopped:
                    continue
                except KeyRefused as exc:  # the rest are cancelled below; finished ones are kept
                    raise PartialBatchError(str(exc), done) from None
                except BackendError as exc:
                    first_error = first_error or exc
                    continue
                done[futures[f]] = gen
                yield futures[f], gen
        except KeyboardInterrupt:
            stop.set()
            unsent = sum(f.cancel() for f in futures)
            flying = [f for f in futures if not f.cancelled() and futures[f] not in done]
            log.warning("interrupted: %d queued requests not sent; waiting for the %d in flight (at most %g s, "
                        "Ctrl-C again to stop now)", unsent, sum(not f.done() for f in flying), self.options.timeout)
            late = {}
            for f in flying:  # answers that arrive are kept: the caller caches them
                try:
                    late[futures[f]] = f.result()
                except (_Stopped, BackendError):
                    pass
            raise BatchInterrupted(late) from None
        finally:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
        if first_error is not None:  # keep the finished requests (the cache stores them)
            raise PartialBatchError(str(first_error), done)

    def _with_retries(self, index: int, req: GenerationRequest, stop: threading.Event) -> Generation:
        attempts = self.options.max_retries + 1
        for attempt in range(attempts):
            if stop.is_set():
                raise _Stopped()
            server = (index + attempt) % len(self.clients)
            url = self.urls[server]
            try:
                return self._call(self.clients[server], req)
            except self._retryable as exc:
                if attempt == attempts - 1:
                    raise BackendError(
                        f"OpenAI-compatible server {url} failed after {attempts} attempts "
                        f"({_describe(exc)}); check the server, or raise --max-retries / --timeout"
                    ) from None
                delay, why = self.retry_delay(exc, attempt)
                log.info("%s: %s; retry %d/%d in %.2f s (%s)", url, _describe(exc), attempt + 1, attempts - 1,
                         delay, why)
                if stop.wait(delay):
                    raise _Stopped() from None
            except self._status_error as exc:  # 4xx other than 429: retrying will not help
                if exc.status_code in PROMPT_STATUSES:  # this prompt only: a failed answer, the run goes on
                    said = _server_message(exc)
                    log.warning("%s refused a prompt (HTTP %d: %s); counted as a failed answer", url,
                                exc.status_code, said)
                    return Generation(text="", finish_reason="error", error=f"HTTP {exc.status_code} from {url}: {said}")
                raise self._refused(exc, url, stop) from None
        raise AssertionError("unreachable")

    def _refused(self, exc, url: str, stop: threading.Event) -> Exception:
        """The one-line error for a 4xx reply that refuses more than one prompt (a key, a model name)."""
        status, said = exc.status_code, _server_message(exc)
        if status in AUTH_STATUSES:
            stop.set()  # workers send nothing more; the ones in flight finish
            return KeyRefused(f"OpenAI-compatible server {url} refused the API key (HTTP {status}: {said}); "
                              f"check the API key in {self.options.api_key_env} for this --base-url")
        return BackendError(f"OpenAI-compatible server {url} rejected the request for model {self._model_id!r} "
                            f"(HTTP {status}: {said}); check the model name")

    def retry_delay(self, exc: Exception, attempt: int) -> tuple[float, str]:
        """Seconds before retry `attempt` + 1 and why: the server's Retry-After (capped at
        --timeout), else the jittered exponential backoff."""
        after = retry_after(getattr(exc, "response", None))
        if after is not None:
            return min(after, self.options.timeout), "the server's Retry-After"
        return min(30.0, self.options.backoff * 2**attempt) * (0.5 + self._rng.random()), "backoff"

    def _call(self, client, req: GenerationRequest) -> Generation:
        from openai.types import Completion
        from openai.types.chat import ChatCompletion

        try:
            resp = self._request(client, req)
        except ValueError as exc:  # the client could not decode the body it was told is JSON
            raise MalformedResponse(f"HTTP 200 with a body that is not JSON: {exc}") from None
        expected = ChatCompletion if req.messages is not None else Completion
        if not isinstance(resp, expected) or not getattr(resp, "choices", None):
            body = resp if isinstance(resp, str) else type(resp).__name__
            raise MalformedResponse(f"HTTP 200 without a completion in the body ({str(body)[:60]!r})")
        try:
            gen = self._generation(resp, req)
            choice = resp.choices[0]
            raw = choice.message.content if req.messages is not None else choice.text
        except (AttributeError, TypeError, IndexError, KeyError, ValueError) as exc:
            raise MalformedResponse(f"HTTP 200 with a completion missing its fields ({type(exc).__name__})") from None
        if raw is None:  # a content filter, a refusal, a tool call: no text to score
            refusal = getattr(getattr(choice, "message", None), "refusal", None)
            gen.error = (f"the answer from {str(client.base_url).rstrip('/')} has null content (finish_reason "
                         f"{choice.finish_reason!r}" + (f", refusal {_one_line(refusal)!r}" if refusal else "") + ")")
            log.warning("%s; counted as a failed answer", gen.error)
        return gen

    def _request(self, client, req: GenerationRequest):
        p = req.params
        kwargs = dict(model=self._model_id, max_tokens=p.max_new_tokens, temperature=p.temperature,
                      top_p=p.top_p, seed=request_seed(req))
        if p.stop:
            kwargs["stop"] = list(p.stop)
        if req.messages is not None:
            if p.logprobs or p.candidates:  # llama.cpp's server needs top_logprobs set
                kwargs.update(logprobs=True, top_logprobs=TOP_K_CHAT if p.candidates else 1)
            return client.chat.completions.create(
                messages=[{"role": r, "content": c} for r, c in req.messages], **kwargs
            )
        if p.logprobs or p.candidates:
            kwargs["logprobs"] = TOP_K_COMPLETION if p.candidates else 1
        return client.completions.create(prompt=req.prompt, **kwargs)

    @staticmethod
    def _generation(resp, req: GenerationRequest) -> Generation:
        p = req.params
        if req.messages is not None:
            choice = resp.choices[0]
            content = choice.logprobs.content if choice.logprobs is not None else None
            if content and _ends_with_eos(choice, [t.token for t in content], choice.message.content or ""):
                content = content[:-1]
            lps = [t.logprob for t in content] if p.logprobs and content is not None else None
            first = {t.token: t.logprob for t in content[0].top_logprobs or []} if content else None
            return Generation(text=choice.message.content or "", token_logprobs=lps,
                              finish_reason=choice.finish_reason, candidate_logprobs=_candidates(p.candidates, first))
        choice = resp.choices[0]
        lps, first = None, None
        if choice.logprobs is not None:
            if p.logprobs and choice.logprobs.token_logprobs is not None:
                lps = [float(x) for x in choice.logprobs.token_logprobs]
                if _ends_with_eos(choice, list(choice.logprobs.tokens or []), choice.text or ""):
                    lps = lps[:-1]
            if choice.logprobs.top_logprobs:
                first = dict(choice.logprobs.top_logprobs[0] or {})
        return Generation(text=choice.text or "", token_logprobs=lps, finish_reason=choice.finish_reason,
                          candidate_logprobs=_candidates(p.candidates, first))


def _ends_with_eos(choice, tokens: list[str], text: str) -> bool:
    """Whether the last listed token is an end-of-sequence token the text does not contain: a
    server that stopped on it lists it (vLLM's `<|im_end|>`), the local backends never count it.
    Told by the tokens before it spelling the whole text; after a stop string they do not (the text
    is cut before it, its tokens stay listed, as the local backends keep them)."""
    return choice.finish_reason == "stop" and len(tokens) > 0 and "".join(tokens[:-1]) == text


def _describe(exc: Exception) -> str:
    if isinstance(exc, MalformedResponse):
        return str(exc)
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    return f"HTTP {status} {name}" if status else name


def _one_line(text, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _server_message(exc) -> str:
    """The server's own words in an error reply (`{"error": {"message": ...}}`, or the body), one line."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        said = inner.get("message") if isinstance(inner, dict) else inner
        if said:
            return _one_line(said)
    if isinstance(body, str) and body.strip():
        return _one_line(body)
    response = getattr(exc, "response", None)
    text = getattr(response, "text", None)
    if text and text.strip():
        return _one_line(text)
    return _one_line(getattr(exc, "message", None) or type(exc).__name__)


def retry_after(response) -> float | None:
    """Seconds the server asks to wait (`retry-after-ms`, or `Retry-After` in seconds or as an
    HTTP date; a date in the past is 0), None when it does not say."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = (headers.get(name) or "").strip()
        if not value:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            if scale != 1.0:
                continue
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            seconds = when.timestamp() - time.time()
        if math.isnan(seconds):
            return None
        return max(0.0, seconds)
    return None
