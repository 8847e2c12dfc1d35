"""`openai` backend: any OpenAI-compatible endpoint through the official `openai` client.

Requests run with bounded concurrency; several base URLs share the load (request i goes to
server i mod n, and each retry moves to the next server). 429, 5xx, timeouts and dropped
connections are retried with exponential backoff and jitter (retry k waits
min(30, backoff * 2**k) * U[0.5, 1.5) seconds); after the last retry the error is one clear line.
The API key comes from OPENAI_API_KEY (local servers accept any key).

Candidate log-probabilities (`SamplingParams.candidates`) are read from the first position's
top-k list (`top_logprobs`, k = 20 on chat, 5 on completions as the OpenAI API allows): a
candidate is the listed token whose text equals it, -inf when it is not listed.
"""
from __future__ import annotations

import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Iterator, Sequence

from sage.api import Generation, GenerationRequest, StreamingBackend
from sage.generation.backend_registry import (
    BACKENDS,
    BackendError,
    BackendOptions,
    PartialBatchError,
    request_seed,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
TOP_K_CHAT, TOP_K_COMPLETION = 20, 5


class MalformedResponse(Exception):
    """An answer that is not an OpenAI completion (HTTP 200 with a body that is not JSON, or JSON
    without choices): a proxy's or gateway's error page, say. Retried like a 5xx."""


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
        self._rng = random.Random(self.options.retry_seed)

    @property
    def model_id(self) -> str:
        return self._model_id

    def generate_iter(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, Generation]]:
        """Requests in flight at once (bounded); each is yielded as its answer arrives."""
        if not requests:
            return
        workers = max(1, min(self.options.concurrency, len(requests)))
        done, first_error = {}, None
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(self._with_retries, i, r): i for i, r in enumerate(requests)}
            for f in as_completed(futures):
                try:
                    done[futures[f]] = f.result()
                except BackendError as exc:
                    first_error = first_error or exc
                    continue
                yield futures[f], done[futures[f]]
        if first_error is not None:  # keep the finished requests (the cache stores them)
            raise PartialBatchError(str(first_error), done)

    def _with_retries(self, index: int, req: GenerationRequest) -> Generation:
        attempts = self.options.max_retries + 1
        for attempt in range(attempts):
            server = (index + attempt) % len(self.clients)
            try:
                return self._call(self.clients[server], req)
            except self._retryable as exc:
                if attempt == attempts - 1:
                    raise BackendError(
                        f"OpenAI-compatible server {self.urls[server]} failed after {attempts} attempts "
                        f"({_describe(exc)}); check the server, or raise --max-retries / --timeout"
                    ) from None
                delay = min(30.0, self.options.backoff * 2**attempt) * (0.5 + self._rng.random())
                log.info("%s: %s; retry %d/%d in %.2f s", self.urls[server], _describe(exc), attempt + 1,
                         attempts - 1, delay)
                time.sleep(delay)
            except self._status_error as exc:  # 4xx other than 429: retrying will not help
                raise BackendError(
                    f"OpenAI-compatible server {self.urls[server]} rejected the request for model "
                    f"{self._model_id!r} ({_describe(exc)}); check the model name and the API key"
                ) from None
        raise AssertionError("unreachable")

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
            return self._generation(resp, req)
        except (AttributeError, TypeError, IndexError, KeyError, ValueError) as exc:
            raise MalformedResponse(f"HTTP 200 with a completion missing its fields ({type(exc).__name__})") from None

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
