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
    its import (a finder that wraps the module's loader, and steps aside once the module
    has run). So that a package can register something with an optional dependency
    without importing it."""
    if name in sys.modules:
        then()
        return
    sys.meta_path.insert(0, _AfterImport(name, then))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds ``name`` through the other finders and wraps its loader to call ``then``.

    It stays in ``sys.meta_path`` until the module has been executed, not only found: a
    ``importlib.util.find_spec(name)`` that checks whether the module is installed (the
    scheduler plugin does, before importing it) must not use up the hook."""

    def __init__(self, name: str, then: Callable[[], object]):
        self.name = name
        self.then: Callable[[], object] | None = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name or self.then is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            self._fire()

        loader.exec_module = exec_module
        return spec

    def _fire(self) -> None:
        then, self.then = self.then, None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if then is not None:
            then()
