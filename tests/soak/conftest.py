"""The soak suite runs only when asked for: ``pytest -m soak tests/soak`` (bounded mode),
or with ``DASK_BACC_SOAK`` set (``bounded`` or ``full``). Otherwise its tests are
deselected, so the README's ``pytest -q`` stays as fast as before."""

from __future__ import annotations

import os


def soak_requested(config) -> bool:
    return "soak" in (config.getoption("markexpr", "") or "") or bool(
        os.environ.get("DASK_BACC_SOAK")
    )


def pytest_collection_modifyitems(config, items):
    if soak_requested(config):
        return
    here = os.path.dirname(__file__)
    keep, drop = [], []
    for item in items:
        (drop if str(item.fspath).startswith(here) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
