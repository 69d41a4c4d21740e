#!/usr/bin/env bash
# The soak and chaos suite in its bounded mode (tests/soak: a multi-process cluster, 600
# coded jobs, SIGKILLed workers, a scheduler restart; about 4 minutes on 2 cores; then
# test_freeze.py: 50 jobs while workers are frozen with SIGSTOP/SIGCONT, about 30 s; then
# test_worker_faults.py: a worker frozen during a timeout=5 decode, the holder of a
# CodedData share killed during map, about 30 s).
# DASK_BACC_SOAK=full runs the full mode (docs/reliability.md).
set -euo pipefail

.venv/bin/python -m pytest -q -m soak tests/soak
