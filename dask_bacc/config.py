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


def get(key: str) -> Any:
    """Read ``bacc.<key>`` at call time (so ``dask.config.set`` and ``DASK_BACC__*`` apply).

    Every setting has its default in ``bacc.yaml``, the one place defaults are written;
    a key that is not there raises ``KeyError``.
    """
    try:
        return dask.config.get(f"bacc.{key}")
    except KeyError:
        # defaults may have been wiped by a config reset: re-register and read again
        load_defaults()
        return dask.config.get(f"bacc.{key}")


def seconds(key: str) -> float:
    """``bacc.<key>`` as seconds: a number, or a duration such as ``"500ms"`` or ``"10s"``."""
    from dask.utils import parse_timedelta

    return float(parse_timedelta(get(key), default="s"))


load_defaults()
