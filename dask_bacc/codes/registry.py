"""Name -> code class registry (the numcodecs pattern)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..exceptions import UnknownCodeError
from .base import Code
from .berrut import BerrutCode
from .bspline import BSplineCode
from .lagrange import LagrangeCode
from .repetition import RepetitionCode, Uncoded
from .spline import SplineCode

__all__ = [
    "ALIASES",
    "code_class",
    "code_label",
    "get_code",
    "register_code",
    "registered_codes",
    "unknown_code",
]

#: names :func:`get_code` accepts besides the registered ones
ALIASES = ("systematic-berrut", "systematic-spline", "systematic-bspline")

_REGISTRY: dict[str, type[Code]] = {}

_C = TypeVar("_C", bound=type[Code])


def register_code(cls: _C) -> _C:
    """Register a :class:`Code` subclass under its ``name`` (usable as a decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Code)) or not cls.name:
        raise TypeError(f"can only register Code subclasses with a name, got {cls!r}")
    _REGISTRY[cls.name] = cls
    return cls


def registered_codes() -> list[str]:
    """Names accepted by :func:`get_code`."""
    return sorted(_REGISTRY)


def _resolve(name: str, options: dict[str, Any]) -> tuple[type[Code], dict[str, Any]]:
    if not isinstance(name, str):
        raise TypeError(f"code name must be a string, got {type(name).__name__}")
    key = name.lower().replace("_", "-")
    if key in ALIASES:
        if not options.pop("systematic", True):
            raise ValueError(f"code {key!r} cannot take systematic=False")
        key, options = key.split("-", 1)[1], {"systematic": True, **options}
    try:
        return _REGISTRY[key], options
    except KeyError:
        raise unknown_code(name, [*registered_codes(), *ALIASES]) from None


def unknown_code(name: str, known: Sequence[str]) -> UnknownCodeError:
    """The error for a code name that is not one of ``known``, with the nearest match."""
    import difflib

    close = difflib.get_close_matches(name.lower().replace("_", "-"), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return UnknownCodeError(f"unknown code {name!r}{hint}; the codes are {sorted(known)}")


def code_label(config: Mapping[str, object]) -> str:
    """The name a user gives for a code's ``get_config()``: ``"systematic-spline"`` for a
    systematic spline code (the aliases), the registry name otherwise."""
    name = str(config.get("name", "?"))
    if name == "grouped":  # codes/grouped.py: the inner code, in groups
        inner = str(config.get("code", "?"))
        return f"{inner} in {len(config.get('sizes') or ())} groups"  # type: ignore[arg-type]
    return f"systematic-{name}" if config.get("systematic") else name


def code_class(name: str) -> type[Code]:
    """The class :func:`get_code` builds for ``name`` (aliases resolved), without building it."""
    return _resolve(name, {})[0]


def get_code(name: str, K: int, N: int | None = None, **options: Any) -> Code:
    """Build a code by name.

    Parameters
    ----------
    name : str
        One of :func:`registered_codes` (``"berrut"``, ``"spline"``, ``"bspline"``,
        ``"lagrange"``, ``"repetition"``, ``"uncoded"``), or ``"systematic-<name>"`` of
        the first three as a shorthand for ``get_code("<name>", ..., systematic=True)``.
    K, N : int
        Data blocks and coded blocks (``N`` may be omitted for ``"uncoded"``).
    **options
        Code-specific options, e.g. ``systematic=True`` or ``degree=3``.
    """
    cls, options = _resolve(name, dict(options))
    if N is None:
        if cls is not Uncoded:
            raise ValueError(f"code {name!r} needs N, the number of coded tasks")
        return Uncoded(K, None, **options)
    return cls(K, N, **options)


for _cls in (BerrutCode, SplineCode, BSplineCode, LagrangeCode, RepetitionCode, Uncoded):
    register_code(_cls)
