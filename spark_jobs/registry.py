"""A registry filled by the modules of one package: the IR's operators and the spec's YAML ops.

Layer 0 (foundations): both registries need the same three things, a name -> definition table
that refuses a second definition of a name, and loading every module of their package once
(each module registers what it defines at import), with the loaded mark taken back when an
import fails, so the next lookup raises that import's error again instead of answering "unknown"
from a half-filled table.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    name: str


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """Definitions by name, from the modules of ``package`` (imported on the first lookup)."""

    def __init__(self, package: str, kind: str):
        self.package, self.kind = package, kind
        self._items: dict[str, T] = {}
        self._loaded = False

    def register(self, item: T) -> T:
        known = self._items.get(item.name)
        if known is not None and known is not item:
            raise ValueError(f"{self.kind} {item.name!r} is registered twice")
        self._items[item.name] = item
        return item

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)

    def _load(self) -> None:
        # marked loaded first: a module may look up another definition while it loads
        if self._loaded:
            return
        self._loaded = True
        try:
            package = importlib.import_module(self.package)
            for info in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{self.package}.{info.name}")
        except BaseException:
            self._loaded = False
            raise

    def get(self, name: str) -> T | None:
        self._load()
        return self._items.get(name)

    def values(self) -> list[T]:
        """Every definition, in registration order."""
        self._load()
        return list(self._items.values())
