"""The winner's curse in the straggler model, before and after issue 42 (item 3).

A planner places a job's tasks on the workers the model predicts fastest; with a few
observations per worker those are the workers whose record happens to look good, and
their predicted P(late) is biased low. This runs :class:`LatencyModel` in a closed loop
with a planner-like placement, no cluster: each job draws latencies from the model
(:meth:`LatencyModel.sample`), places ``--placed`` tasks on the workers of least mean
draw (late draws costed at 4 median tasks, as ``bacc.auto.late-cost``), runs them on
synthetic latencies (lognormal 0.05 on time, 20x when late), decodes at the
``--wait``-th result and cuts the rest short (censored), as the runtime does, and feeds
the model what the scheduler plugin would.

Reported, median over ``--seeds`` seeds, for each shrinkage rule (``fixed``: one
observation, the rule before; ``adaptive``: the empirical-Bayes strength with the change
detector):

* i.i.d. stragglers at p = 0.05, 0.1, 0.2: the mean P(late) the model plans with
  (``LatencyModel._rate``, what :meth:`~LatencyModel.sample` draws by) of the placed
  workers and of the ``--fastest`` predicted fastest among them, against the true p and
  the mean over all workers, averaged over the jobs after a warm-up;
* a slow host (all its workers' tasks late) that moves to the next host every
  ``--move`` jobs over a background of p = 0.05, and a single worker (placed in the
  last job) that turns always late: jobs until no newly slow worker is placed (1: the
  first job after the change already avoids it); "not avoided in time" counts changes
  still placed on when the slow host moved on, or after ``--horizon`` jobs.

::

    python benchmarks/winners_curse.py --seeds 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dask_bacc.diagnostics.latency import LatencyModel, TaskObservation

LATE_COST = 4.0


def workers_and_hosts(n: int, per_host: int) -> tuple[list[str], dict[str, str]]:
    workers = [f"tcp://10.0.{k // per_host}.{k}:1" for k in range(n)]
    return workers, {w: w.split("//")[1].rsplit(".", 1)[0] for w in workers}


def place(model: LatencyModel, workers: list[str], rng: np.random.Generator, n: int) -> list[str]:
    """The ``n`` workers of least mean draw (late draws costed), fastest first."""
    draws = model.sample(workers, rng, size=128)
    costed = np.where(draws > model.late_factor, np.maximum(draws, LATE_COST), draws)
    order = np.argsort(costed.mean(axis=0), kind="stable")
    return [workers[j] for j in order[:n]]


def run_job(
    model: LatencyModel,
    placed: list[str],
    host_of: dict[str, str],
    rng: np.random.Generator,
    p_late: dict[str, float],
    wait: int,
) -> None:
    d = {}
    for w in placed:
        late = rng.random() < p_late[w]
        d[w] = float(rng.lognormal(0.0, 0.05)) * (20.0 if late else 1.0)
    end = sorted(d.values())[wait - 1] * 1.05  # decode, then the clean-up
    model.observe_job(TaskObservation(w, host_of[w], min(t, end), t <= end) for w, t in d.items())


def iid(rule: str, p: float, seed: int, args: argparse.Namespace) -> tuple[float, float, float]:
    """Mean planned P(late) of the fastest, of the placed and of all workers."""
    rng = np.random.default_rng(seed)
    workers, host_of = workers_and_hosts(args.workers, args.per_host)
    model = LatencyModel(shrinkage=rule)
    truth = dict.fromkeys(workers, p)
    fastest, placed_mean, everyone = [], [], []
    for j in range(args.warmup + args.jobs):
        placed = place(model, workers, rng, args.placed) if j else workers[: args.placed]
        if j >= args.warmup:
            rate = {w: model._rate(w, host_of[w]) for w in workers}
            fastest.append(np.mean([rate[w] for w in placed[: args.fastest]]))
            placed_mean.append(np.mean([rate[w] for w in placed]))
            everyone.append(np.mean(list(rate.values())))
        run_job(model, placed, host_of, rng, truth, args.wait)
    return float(np.mean(fastest)), float(np.mean(placed_mean)), float(np.mean(everyone))


def detection(rule: str, kind: str, seed: int, args: argparse.Namespace) -> list[int]:
    """Jobs until no newly slow worker is placed, per change."""
    rng = np.random.default_rng(seed)
    workers, host_of = workers_and_hosts(args.workers, args.per_host)
    hosts = sorted(set(host_of.values()))
    model = LatencyModel(shrinkage=rule)
    base = dict.fromkeys(workers, 0.05)
    placed = workers[: args.placed]
    found: list[int] = []
    if kind == "host":
        changes = [args.warmup + k * args.move for k in range(args.moves)]
    else:
        changes = [args.warmup]
    slow: set[str] = set()
    since = None
    for j in range(changes[-1] + args.horizon + 1):
        if j in changes:
            if since is not None:  # the previous slow set was never avoided
                found.append(args.horizon + 1)
            if kind == "host":
                h = hosts[changes.index(j) % len(hosts)]
                slow = {w for w in workers if host_of[w] == h}
            else:
                slow = {placed[int(rng.integers(len(placed)))]}
            since = 0
        truth = {w: 1.0 if w in slow else base[w] for w in workers}
        if j:
            placed = place(model, workers, rng, args.placed)
        if since is not None:
            if since and not slow & set(placed):
                found.append(since)
                since = None
            elif since >= args.horizon:
                found.append(args.horizon + 1)
                since = None
            else:
                since += 1
        run_job(model, placed, host_of, rng, truth, args.wait)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--per-host", type=int, default=4)
    ap.add_argument("--placed", type=int, default=16, help="tasks a job places (N)")
    ap.add_argument("--wait", type=int, default=12, help="results a job decodes from (k)")
    ap.add_argument("--fastest", type=int, default=8, help="the predicted fastest reported")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=20, help="jobs measured after the warm-up")
    ap.add_argument("--move", type=int, default=8, help="jobs between moves of the slow host")
    ap.add_argument("--moves", type=int, default=4)
    ap.add_argument("--horizon", type=int, default=15, help="jobs a change is followed")
    ap.add_argument("--rules", default="fixed,adaptive")
    args = ap.parse_args()
    rules = args.rules.split(",")
    t0 = time.perf_counter()
    print(
        f"W = {args.workers} workers ({args.per_host} per host), N = {args.placed} placed, "
        f"decode at the {args.wait}th, medians over {args.seeds} seeds"
    )
    print("\ni.i.d. stragglers: mean planned P(late) after a warm-up of", args.warmup, "jobs")
    print(f"| p | rule | fastest {args.fastest} | placed {args.placed} | all | fastest / p |")
    print("|--:|---|--:|--:|--:|--:|")
    for p in (0.05, 0.1, 0.2):
        for rule in rules:
            rows = [iid(rule, p, seed, args) for seed in range(args.seeds)]
            f, pl, a = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"| {p} | {rule} | {f:.3f} | {pl:.3f} | {a:.3f} | {f / p:.2f} |")
    print("\nJobs until no newly slow worker is placed (1: the first job after the change)")
    print("| change | rule | median | 90th percentile | not avoided in time (of) |")
    print("|---|---|--:|--:|--:|")
    for kind, label in (
        ("host", f"slow host moving every {args.move} jobs"),
        ("one", "one worker"),
    ):
        for rule in rules:
            found = [x for seed in range(args.seeds) for x in detection(rule, kind, seed, args)]
            never = sum(x > args.horizon for x in found)
            print(
                f"| {label} | {rule} | {statistics.median(found):g} | "
                f"{np.quantile(found, 0.9):g} | {never} ({len(found)}) |"
            )
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
