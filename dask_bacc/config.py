"""dask-bacc settings live in ``dask.config`` under ``bacc:`` (defaults in ``bacc.yaml``)."""

from __future__ import annotations

import os
from typing import Any

import dask.config
import yaml

__all__ = ["get", "load_defaults", "seconds"]

_FN = os.path.join(os.path.dirname(__file__), "bacc.yaml")


def load_defaults() -> dict[str, Any]:
    """Register the packaged defaults with ``dask.config`` (idempotent).

    Call again after anything that resets the config (``distributed.utils_test`` does).
    """
    with open(_FN) as f:
        defaults = yaml.safe_load(f)
    dask.config.update_defaults(defaults)
    return defaults


def get(key: str, default: Any = None) -> Any:
    """Read ``bacc.<key>`` at call time (so ``dask.config.set`` and ``DASK_BACC__*`` apply)."""
    sentinel = object()
    value = dask.config.get(f"bacc.{key}", default=sentinel)
    if value is sentinel:
        # defaults may have been wiped by a config reset: re-register and retry once
        load_defaults()
        value = dask.config.get(f"bacc.{key}", default=default)
    return value


def seconds(key: str, default: str | float) -> float:
    """``bacc.<key>`` as seconds: a number, or a duration such as ``"500ms"`` or ``"10s"``."""
    from dask.utils import parse_timedelta

    return float(parse_timedelta(get(key, default), default="s"))


load_defaults()
