"""Lazy attributes for a package's ``__init__`` (PEP 562 module ``__getattr__``)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def attach(
    package: str, names: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, importing each attribute's module
    (``names``: submodule relative to ``package`` -> attribute names) on first access."""
    where = {name: module for module, attrs in names.items() for name in attrs}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name], package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__


def when_imported(name: str, then: Callable[[], object]) -> None:
    """Call ``then()`` once module ``name`` is imported: now if it is, else right after
    its import (a finder that steps aside once, wrapping the module's loader). So that a
    package can register something with an optional dependency without importing it."""
    if name in sys.modules:
        then()
        return
    sys.meta_path.insert(0, _AfterImport(name, then))


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, then: Callable[[], object]):
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the real finders find the module
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            self.then()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
