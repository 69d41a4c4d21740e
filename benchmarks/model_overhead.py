"""Per-job cost of the straggler model on the scheduler (issue 16: <= 2 ms per job).

Times ``BaccDiagnostics._close`` (what the scheduler plugin does when a coded job ends) on
synthetic jobs of N = 64 eval tasks over 16 workers (48 returned, 8 cut short, 8 still
running), with the model off and on, interleaved, 100 jobs per measurement, median of
``--rounds``; and ``LatencyModel.snapshot`` for a model of 1000 workers::

    python benchmarks/model_overhead.py --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import timeit

import numpy as np

from dask_bacc.diagnostics.latency import LatencyModel, TaskObservation
from dask_bacc.diagnostics.plugin import BaccDiagnostics, JobStats, TaskTrack

N = 64


def make_job(k: int, rng: np.random.Generator) -> JobStats:
    job = JobStats(f"tok{k}", 0.0)
    job.K, job.N, job.needed = 32, N, 48
    for i in range(N):
        t = TaskTrack(i, "eval", 0.0)
        t.worker = f"tcp://10.0.{i % 16}.{i % 4}:8786"
        t.dispatched = 0.001
        if i < 56:
            t.outcome, t.ended = "landed", 0.001 + float(rng.lognormal(0, 0.3))
        else:
            t.outcome = "running"
        job.tasks[i] = t
    job.report = {
        "status": "finished",
        "returned": list(range(48)),
        "straggled": list(range(48, 64)),
        "late": [],
        "failed": {},
    }
    return job


def close_ms(model: LatencyModel | None, jobs: int, rng: np.random.Generator) -> float:
    plugin = BaccDiagnostics(history=100)
    plugin.model = model
    batch = [make_job(k, rng) for k in range(jobs)]
    for job in batch:
        plugin.jobs[job.token] = job
    it = iter(batch)
    return timeit.timeit(lambda: plugin._close(next(it), 10.0), number=jobs) / jobs * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--jobs", type=int, default=100, help="jobs closed per measurement")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(args.rounds):
        for label in ("off", "on") if r % 2 == 0 else ("on", "off"):
            model = LatencyModel() if label == "on" else None
            times[label].append(close_ms(model, args.jobs, rng))
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    print(f"_close per job, N = {N}, median of {args.rounds} interleaved rounds:")
    print(f"  model off {off:.3f} ms, on {on:.3f} ms: the model's share {on - off:.3f} ms")
    model = LatencyModel()
    for k in range(20):
        model.observe_job(
            [
                TaskObservation(
                    f"tcp://10.{w // 250}.{w % 250}.1:1",
                    f"10.{w // 250}.{w % 250}.1",
                    float(rng.lognormal(0, 0.3)),
                )
                for w in range(k * 50, k * 50 + 50)
            ]
        )
    snaps = []
    for _ in range(args.rounds):
        model._snapshot = None  # what a job's close does: the next snapshot is rebuilt
        snaps.append(timeit.timeit(model.snapshot, number=1) * 1e3)
    print(
        f"snapshot of {len(model.snapshot()['workers'])} workers: {statistics.median(snaps):.1f} ms"
    )


if __name__ == "__main__":
    main()
