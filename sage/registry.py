"""One small registry class, instantiated once per kind (backends, editors, similarities, ...).

Adding a method means writing one module and one `@REGISTRY.register("name")` line.
"""
from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

from sage.errors import SageInputError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, lazy_modules: dict[str, str] | None = None):
        self.kind = kind
        self._items: dict[str, T] = {}
        # name -> module that registers it when imported; keeps optional dependencies lazy.
        self._lazy = dict(lazy_modules or {})

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def add_lazy(self, name: str, module: str) -> None:
        self._lazy[name] = module

    def names(self) -> list[str]:
        return sorted(set(self._items) | set(self._lazy))

    def get(self, name: str) -> T:
        if name not in self._items and name in self._lazy:
            importlib.import_module(self._lazy[name])
        try:
            return self._items[name]
        except KeyError:
            raise SageInputError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name in self._items or name in self._lazy
