"""Shared fixtures; and the test markers (registered in pyproject.toml).

A fast run for contributors, about 1.5 minutes on a 2-core machine (the goal is one),
leaves out the tests marked ``slow`` (several seconds or more each: the fuzz run, the examples' and
benchmarks' smoke runs, lost-worker recoveries, most multi-worker cluster jobs),
``browser`` (tests/test_browser.py, headless Chromium from ``ci/browser.sh``) and
``multiprocess`` (scheduler or worker processes: tests/test_multiprocess.py, the README's
blocks on a process ``LocalCluster``)::

    .venv/bin/python -m pytest -q -m "not slow and not browser and not multiprocess"

The plain ``pytest -q`` (the README's command, and CI's) still runs every test but the
soak suite (tests/soak, ``-m soak``).
"""

import pytest

import dask_bacc.config

pytest_plugins = ["distributed.utils_test"]


@pytest.fixture(autouse=True)
def _bacc_defaults():
    """distributed.utils_test resets dask.config; put the bacc: defaults back."""
    dask_bacc.config.load_defaults()
    yield


@pytest.fixture(autouse=True)
def _fresh_auto_state(monkeypatch):
    """Auto mode's client side lives in the process (the calibration, the learned
    overheads, the cached plans and views): each test starts with none."""
    from dask_bacc.runtime import auto_cache, submit
    from dask_bacc.runtime.auto import Calibration, Overheads

    monkeypatch.setattr(submit, "_calibration", Calibration())
    monkeypatch.setattr(submit, "_overheads", Overheads())
    monkeypatch.setattr(auto_cache, "plans", auto_cache.PlanCache())
    monkeypatch.setattr(auto_cache, "views", auto_cache.ViewCache())
