"""Shared fixtures; and the test markers (registered in pyproject.toml).

A fast run for contributors, under a minute on a 2-core machine, leaves out the tests
marked ``slow`` (several seconds or more each: the fuzz run, the examples' and
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
