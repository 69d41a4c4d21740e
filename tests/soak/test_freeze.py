"""Freeze soak, bounded: coded jobs while workers are frozen (SIGSTOP/SIGCONT) at random.

The bounded version of ``benchmarks/freeze_soak.py`` (issue 23: no new hang in 1,000 jobs
with random frozen workers in a multi-process cluster): 50 jobs over every code on four
``dask worker`` processes, a random worker frozen for 0.2-3 s at a time (at most two), and
twice a new client's first coded job while a worker is frozen (the worker plugin is not
registered on the scheduler then, so that job registers it; ``bacc.plugin-timeout`` bounds
its wait). About 30 s on 2 cores. ``DASK_BACC_SOAK=full`` runs 1000 jobs (the issue's
target; a fresh client every 100), as ``python benchmarks/freeze_soak.py`` does.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import dask
import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "freeze_soak.py"
FULL = os.environ.get("DASK_BACC_SOAK", "").strip().lower() == "full"
JOBS, FRESH_EVERY = (1000, 100) if FULL else (50, 25)


def _load():
    spec = importlib.util.spec_from_file_location("freeze_soak", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.soak
@pytest.mark.timeout(3600 if FULL else 600)
@pytest.mark.parametrize("inline", ["1 MiB", 0], ids=["in-specs", "scattered"])
def test_no_hang_with_random_frozen_workers(tmp_path, inline):
    """Twice: the jobs' small in-memory input in the task specs (the default below
    ``bacc.data-inline-limit``), and scattered to the workers as large input is (a
    transfer to a frozen worker is hedged; a block held by one is sent again)."""
    freeze_soak = _load()
    out = tmp_path / "freeze_soak.json"
    with dask.config.set({"bacc.data-inline-limit": inline}):
        summary = freeze_soak.main(
            [
                "--jobs",
                str(JOBS),
                "--workers",
                "4",
                "--fresh-client-every",
                str(FRESH_EVERY),
                "--timeout",
                "60",
                "--progress-every",
                "0",
                "--out",
                str(out),
            ]
        )
    assert json.loads(out.read_text())["jobs"] == JOBS
    assert summary["freezes"] >= 5, summary["freezes"]
    assert summary["hangs"] == 0, summary["hang_details"]
    assert summary["wrong"] == 0, summary["error_details"]
    # no job has a timeout and no worker leaves: no error is expected either
    assert summary["errors_by_type"] == {}, summary["error_details"]
    assert summary["worker_processes_exited"] == [], summary["worker_processes_exited"]
    assert summary["fresh_client_first_job_outcomes"] == {"ok": JOBS // FRESH_EVERY}
    # a client's first job waits at most bacc.plugin-timeout (2 s) for the worker plugin
    assert summary["fresh_client_first_job_max_seconds"] < 30
