"""Pile-up of stragglers across ``CodedData.map`` calls, with ``bacc.reroute-busy`` on and off.

Run it with::

    python benchmarks/iterative.py                       # ~2 min on 2 cores
    python benchmarks/iterative.py --slow-workers 1 --steps 40 --json pileup.json
    python benchmarks/iterative.py --help

A training loop calls ``CodedData.map`` once per step. When a coded job decodes without a
straggler and cancels it, the straggler's thread keeps running ``f`` (Python cannot stop a
thread); the next step's task on that worker would queue behind it. Here that slowness is
in ``f`` itself: on each of ``--slow-workers`` workers (the holders of the first shares),
with probability ``p`` per step, ``f`` sleeps ``--sleep`` seconds, non-cooperatively
(``time.sleep``), so nothing at decode stops it. The draws depend on ``(seed, round, step,
worker)`` only: every variant and code meets the same slow steps.

Variants, each a block of ``--steps`` consecutive ``map`` calls on one ``CodedData``:

``clean``
    No slow task, ``bacc.reroute-busy`` on (the default): the baseline of the ratios.
``clean, reroute off``
    No slow task, rerouting off: what the per-call busy check costs.
``slow, reroute on``
    Slow tasks; a share whose worker still runs a cancelled straggler is evaluated on a
    spare worker.
``slow, reroute off``
    Slow tasks; every share's eval queues on the worker that holds it.
``slow, cooperative, reroute off``
    Slow tasks, but ``f`` sleeps in slices and returns once :func:`dask_bacc.cancelled`
    says its job no longer needs it (reroute off, so only cooperation helps).

Blocks run in a seeded shuffled order per round; between blocks the run waits, untimed,
until no worker thread is busy, so each block starts on an idle cluster. Latency is from
``map`` call to the output in hand on the client. Reported per code and variant: p50, p90
and mean step latency, their ratios to the same code's ``clean`` baseline in the same run,
the shares rerouted per step and the results each decode used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    # name: (slow tasks, reroute-busy, f polls dask_bacc.cancelled())
    "clean": (False, True, False),
    "clean, reroute off": (False, False, False),
    "slow, reroute on": (True, True, False),
    "slow, reroute off": (True, False, False),
    "slow, cooperative, reroute off": (True, False, True),
}
BASELINE = "clean"


def step_func(
    block: np.ndarray,
    w: np.ndarray,
    step: int,
    plan: tuple[frozenset[str], float, float, int, int, bool] | None,
) -> np.ndarray:
    """``tanh(block @ w)`` summed over rows; on a slow worker, sometimes sleep first.

    Parameters
    ----------
    block : numpy.ndarray
        The coded share.
    w : numpy.ndarray
        Weights ``(features, outputs)``.
    step : int
        Step number within the block (the draw's key).
    plan : tuple or None
        ``(slow worker names, p, sleep seconds, seed, round, cooperative)``; None: never slow.
    """
    out = np.tanh(np.asarray(block) @ w).sum(axis=0)
    if plan is None:
        return out
    slow, p, sleep, seed, rnd, cooperative = plan
    from distributed import get_worker

    name = str(get_worker().name)
    if name not in slow:
        return out
    index = int(name) if name.isdigit() else 0
    if np.random.default_rng([seed, rnd, step, index]).random() >= p:
        return out
    if not cooperative:
        time.sleep(sleep)  # what an uncooperative f does: nothing stops it
        return out
    import dask_bacc

    end = time.perf_counter() + sleep
    while (left := end - time.perf_counter()) > 0 and not dask_bacc.cancelled():
        time.sleep(min(left, 0.005))
    return out


@dataclass(frozen=True)
class PileupSettings:
    """What :func:`run_pileup` measures (see the module docstring)."""

    workers: int = 12
    K: int = 4
    N: int = 8
    codes: tuple[str, ...] = ("uncoded", "repetition", "berrut")
    variants: tuple[str, ...] = tuple(VARIANTS)
    slow_workers: int = 1
    p: float = 0.3
    sleep: float = 1.0
    steps: int = 40
    rounds: int = 2
    rows: int = 64
    features: int = 16
    seed: int = 0

    def check(self) -> None:
        """Raise ``ValueError`` naming the bad setting."""
        if not 1 <= self.K < self.N <= self.workers:
            raise ValueError(f"need 1 <= K < N <= workers, got {self.K}, {self.N}, {self.workers}")
        if not 1 <= self.slow_workers <= self.K:
            raise ValueError(f"slow workers must lie in [1, K], got {self.slow_workers}")
        for v in self.variants:
            if v not in VARIANTS:
                raise ValueError(f"unknown variant {v!r}; choose from {list(VARIANTS)}")
        if BASELINE not in self.variants:
            raise ValueError(f"the {BASELINE!r} variant is the baseline: keep it")
        if self.steps < 2 or self.rounds < 1:
            raise ValueError("steps must be >= 2 and rounds >= 1")


def _busy(dask_worker: Any) -> int:
    return int(dask_worker.state.executing_count)


def _settle(client: Any, timeout: float = 120.0) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout and any(client.run(_busy).values()):
        time.sleep(0.01)
    return time.perf_counter() - t0


def _stats(x: list[float]) -> dict[str, float]:
    a = np.asarray(x, dtype=float)
    return {"p50": float(np.median(a)), "p90": float(np.quantile(a, 0.9)), "mean": float(a.mean())}


def run_pileup(settings: PileupSettings, echo: Any = None) -> dict[str, Any]:
    """Run every (code, variant) block ``rounds`` times on one embedded cluster.

    Returns
    -------
    dict
        JSON-ready: ``settings``, ``environment``, ``blocks`` (per block: code, variant,
        round, per-step ``latency``, ``rerouted``, ``used``, ``slow_steps``) and ``summary``
        (per code and variant: latency stats and ratios to the code's baseline).
    """
    import dask
    from distributed import Client, LocalCluster

    import dask_bacc

    settings.check()
    s = settings
    say = echo or (lambda line: None)
    rng = np.random.default_rng([s.seed, 1])
    X = rng.standard_normal((s.K * s.rows, s.features))
    w = rng.standard_normal((s.features, 8)) / np.sqrt(s.features)
    order = np.random.default_rng([s.seed, 2])
    blocks: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    load_start = os.getloadavg()  # other load on the machine skews absolute times
    with (
        dask.config.set({"distributed.admin.low-level-log-length": 50}),
        LocalCluster(
            n_workers=s.workers,
            threads_per_worker=1,
            processes=False,
            dashboard_address=":0",
            memory_limit=0,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(s.workers)
        names = {
            a: str(i["name"]) for a, i in client.scheduler_info(n_workers=-1)["workers"].items()
        }
        data, slow = {}, {}
        for code in s.codes:
            kw = {} if code == "uncoded" else {"n_coded": s.N}
            data[code] = dask_bacc.encode(X, code=code, n_blocks=s.K, client=client, **kw)
            data[code].wait()
            # the holders of the first shares are the slow workers of this code
            slow[code] = frozenset(names[a] for a in data[code].workers[: s.slow_workers])
            for _ in range(3):  # warm up
                data[code].map(step_func, w, -1, None, combine="stack")
        _settle(client)
        for rnd in range(s.rounds):
            cells = [(c, v) for c in s.codes for v in s.variants]
            for i in order.permutation(len(cells)):
                code, variant = cells[i]
                is_slow, reroute, coop = VARIANTS[variant]
                plan = (slow[code], s.p, s.sleep, s.seed, rnd, coop) if is_slow else None
                rec: dict[str, Any] = {
                    "code": code,
                    "variant": variant,
                    "round": rnd,
                    "slow_workers": sorted(slow[code]),
                    "latency": [],
                    "rerouted": [],
                    "used": [],
                }
                with dask.config.set({"bacc.reroute-busy": reroute}):
                    for step in range(s.steps):
                        t0 = time.perf_counter()
                        job = data[code].submit(step_func, w, step, plan, combine="stack")
                        job.result()
                        rec["latency"].append(time.perf_counter() - t0)
                        rec["rerouted"].append(len(job.report.rerouted))
                        rec["used"].append(len(job.report.returned))
                rec["slow_steps"] = (
                    [
                        sum(
                            np.random.default_rng([s.seed, rnd, t, int(n)]).random() < s.p
                            for n in slow[code]
                        )
                        for t in range(s.steps)
                    ]
                    if is_slow
                    else [0] * s.steps
                )
                rec["settle"] = _settle(client)
                blocks.append(rec)
                say(
                    f"round {rnd + 1}/{s.rounds} {code:>10} {variant:<31} "
                    f"mean {np.mean(rec['latency']):.3f}s "
                    f"p90 {np.quantile(rec['latency'], 0.9):.3f}s"
                )
        for d in data.values():
            d.release()
    summary: dict[str, dict[str, Any]] = {}
    for code in s.codes:
        summary[code] = {}
        for v in s.variants:
            lat = [
                x for b in blocks if (b["code"], b["variant"]) == (code, v) for x in b["latency"]
            ]
            rer = [
                x for b in blocks if (b["code"], b["variant"]) == (code, v) for x in b["rerouted"]
            ]
            used = [x for b in blocks if (b["code"], b["variant"]) == (code, v) for x in b["used"]]
            summary[code][v] = {
                "latency": _stats(lat),
                "rerouted_per_step": float(np.mean(rer)),
                "used_per_step": float(np.mean(used)),
            }
        base = summary[code][BASELINE]["latency"]
        for v in s.variants:
            lat = summary[code][v]["latency"]
            summary[code][v]["vs_baseline"] = {q: lat[q] / base[q] for q in ("p50", "p90", "mean")}
    return {
        "settings": asdict(s),
        "environment": {
            "python": platform.python_version(),
            "platform": sys.platform,
            "cpu_count": os.cpu_count(),
            "numpy": np.__version__,
            "dask": dask.__version__,
            "dask_bacc": dask_bacc.__version__,
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        },
        "wall_seconds": time.perf_counter() - t_start,
        "blocks": blocks,
        "summary": summary,
    }


def format_table(result: dict[str, Any]) -> str:
    """Markdown: per code and variant, step latency and its ratios to the baseline."""
    head = (
        "| code | variant | p50 (s) | p90 (s) | mean (s) | p50 / clean | p90 / clean "
        "| mean / clean | rerouted per step | results used per step |"
    )
    lines = [head, "|---|---|" + "--:|" * (head.count(" | ") - 1)]
    for code, per in result["summary"].items():
        for v, r in per.items():
            lat, rat = r["latency"], r["vs_baseline"]
            lines.append(
                f"| {code} | {v} | {lat['p50']:.3f} | {lat['p90']:.3f} | {lat['mean']:.3f} "
                f"| {rat['p50']:.2f} | {rat['p90']:.2f} | {rat['mean']:.2f} "
                f"| {r['rerouted_per_step']:.2f} | {r['used_per_step']:.2f} |"
            )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    """Grouped bars: mean and p90 step latency relative to the clean baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    summary = result["summary"]
    codes = list(summary)
    variants = list(next(iter(summary.values())))
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    width = 0.8 / len(variants)
    for ax, q in zip(axes, ("mean", "p90"), strict=True):
        for k, v in enumerate(variants):
            vals = [summary[c][v]["vs_baseline"][q] for c in codes]
            ax.bar(np.arange(len(codes)) + k * width, vals, width, label=v)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks(np.arange(len(codes)) + width * (len(variants) - 1) / 2, codes)
        ax.set_title(f"{q} step latency / clean {q}", fontsize=9)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    st = result["settings"]
    fig.suptitle(
        f"K={st['K']}, N={st['N']}, {st['workers']} workers; {st['slow_workers']} slow "
        f"worker(s): f sleeps {st['sleep']:g} s with p={st['p']:g} per step",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the table, optionally write JSON and a PNG."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = PileupSettings()
    parser.add_argument("--workers", type=int, default=d.workers)
    parser.add_argument("-K", "--blocks", type=int, default=d.K)
    parser.add_argument("-N", "--coded", type=int, default=d.N)
    parser.add_argument("--codes", default=",".join(d.codes))
    parser.add_argument("--slow-workers", type=int, default=d.slow_workers)
    parser.add_argument("--p", type=float, default=d.p, help="probability a slow worker sleeps")
    parser.add_argument("--sleep", type=float, default=d.sleep, help="seconds f sleeps")
    parser.add_argument("--steps", type=int, default=d.steps, help="map calls per block")
    parser.add_argument("--rounds", type=int, default=d.rounds)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--json", default=None, help="write the result here")
    parser.add_argument("--png", default=None, help="write the plot here")
    args = parser.parse_args(argv)
    settings = PileupSettings(
        workers=args.workers,
        K=args.blocks,
        N=args.coded,
        codes=tuple(c for c in args.codes.split(",") if c),
        slow_workers=args.slow_workers,
        p=args.p,
        sleep=args.sleep,
        steps=args.steps,
        rounds=args.rounds,
        seed=args.seed,
    )
    try:
        settings.check()
    except ValueError as exc:
        parser.error(str(exc))
    result = run_pileup(settings, echo=lambda line: print(line, file=sys.stderr))
    print(format_table(result))
    print(f"wall time {result['wall_seconds']:.1f} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    if args.png:
        plot(result, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
