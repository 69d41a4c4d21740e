"""Settings come from dask.config under bacc:, read at call time."""

from __future__ import annotations

import os
import subprocess
import sys

import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc import config


def test_defaults_registered():
    assert dask.config.get("bacc.code") == "systematic-spline"
    assert dask.config.get("bacc.redundancy") == 2.0
    assert dask.config.get("bacc.wait.berrut") == 0.75
    assert dask.config.get("bacc.wait.spline") == 0.75
    assert dask.config.get("bacc.warn-error") == 0.1
    assert dask.config.get("bacc.oversubscribe") == "raise"


def test_defaults_come_back_after_a_reset():
    with dask.config.set({"bacc": {}}):
        dask.config.config.pop("bacc", None)
        assert config.get("redundancy") == 2.0


@pytest.mark.slow
def test_environment_variable_overrides():
    env = dict(os.environ, DASK_BACC__REDUNDANCY="3.5", DASK_BACC__WAIT__BERRUT="0.5")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dask_bacc, dask; print(dask.config.get('bacc.redundancy'), "
            "dask.config.get('bacc.wait.berrut'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["3.5", "0.5"]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_config_read_at_call_time(c, s, *workers):
    X = np.random.default_rng(0).standard_normal((12, 2))
    job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=3, client=c)
    await job
    assert (job.report.K, job.report.N, job.report.wait_target) == (3, 6, 5)  # ceil(0.75*6)
    assert job.report.code == {
        "name": "spline",
        "K": 3,
        "N": 6,
        "smoothing": 0.0,
        "systematic": True,
    }
    with dask.config.set({"bacc.redundancy": 1.5, "bacc.wait.spline": 1.0}):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=3, client=c)
        await job
    assert (job.report.N, job.report.wait_target) == (5, 5)  # ceil(1.5*3) = 5
    with dask.config.set({"bacc.code": "repetition"}):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=3, client=c)
        out = await job
    assert job.report.code["name"] == "repetition"
    np.testing.assert_array_equal(out, np.tanh(X))
    # N is capped by the workers: 4 blocks at redundancy 2 would want 8 -> 8 workers; 5 -> 8
    job = await dask_bacc.submit_coded(np.tanh, np.ones((5, 1)), n_blocks=5, client=c)
    await job
    assert job.report.N == 8
