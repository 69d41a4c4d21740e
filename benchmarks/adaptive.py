"""Auto mode against hindsight: the best fixed (N, k) per straggler regime (issue 16, point 5).

Run it with::

    python benchmarks/adaptive.py --quick                 # smoke run: 2 rounds, small grid
    python benchmarks/adaptive.py                         # 20 rounds, 3 regimes, ~9 min
    python benchmarks/adaptive.py --regimes heavy --rounds 30
    python benchmarks/adaptive.py --from-json benchmarks/results/adaptive/adaptive.json
    python benchmarks/adaptive.py --map                   # the regime map in hindsight
    python benchmarks/adaptive.py --map --cells 0,3 --rounds 4
    python benchmarks/adaptive.py --map --from-json benchmarks/results/adaptive/hindsight.json

Setup: an in-process ``LocalCluster`` of 16 workers x 1 thread, K = 8 blocks of smooth
data (``smooth_blocks(8, 16, 8, rng)`` as a (128, 8) array), ``f`` = sleep ``--base``
seconds then a small tanh network (fixed seeded weights). A fresh cluster per regime, so
the scheduler's straggler model starts empty in each.

Regimes (straggler injection on the coded tasks, ``dask_bacc.testing``):

- ``stationary``: ``Bimodal(p=0.1, delay=1.0)``;
- ``heavy``: ``Bimodal(p=0.3, delay=1.0)``;
- ``changing``: ``SlowWorkers`` of 3 workers (set A), replaced by another 3 (set B)
  halfway through the rounds.

Variants, one job each per round in a seeded-shuffled order (interleaved, so drift on the
shared machine hits all alike), each job on an idle cluster:

- ``auto``: ``n_coded="auto", wait="auto", error=--error``;
- ``default``: no ``n_coded`` / ``wait`` (2K capped by the workers, 0.75 N plus grace);
- ``N<N>-k<k>``: the fixed grid, ``n_coded=N, wait=k`` (first k results, no grace), N in
  {10, 12, 14, 16}, 8 <= k <= 14, k < N.

Before the rounds of a regime, ``--warmup`` auto jobs (not recorded) let the model learn
it. Per regime and variant: p50, p90, p99 of the wall time (submit to decoded output on
the client), mean and max relative error ``||out - f(X)||_F / ||f(X)||_F``. The oracle
(hindsight): among grid settings whose mean error is within the budget, the least p50
(oracle-p50) and the least p99 (oracle-p99).

The changing regime's recovery: on a fresh cluster, auto jobs only (the model learns
only from them): 15 with slow set A, then 15 with set B; the pre-change p50 is that of the
last 10 jobs before the switch, and the recovery is the first job after the switch (1 =
the first) whose time is <= 1.1x that p50 and stays so for the next 3 jobs.

Outputs: ``benchmarks/results/adaptive/adaptive.json`` (all raw records),
``docs/adaptive/benchmark.md`` (tables, with auto/oracle p50 and p99 as ratios against
issue 27's 1.1x target) and ``docs/adaptive/benchmark.png`` (plot).

``--map`` (issue 27, item 5): the cells of the quick regime map
(``regimes.quick_cells()``, ``--cells`` a subset by number) on the test bed of real
worker processes, through regimes.py's own runner (imported, not copied): per round one
job of every strategy (``--strategies``; default plain, repetition, speculative,
systematic-spline, berrut, auto) in a seeded-shuffled order, ``--rounds`` rounds per cell
(default 10), auto with ``error=--error``. Per cell, the oracle is the best fixed strategy
in hindsight: among the strategies other than auto with no failed job and a mean error
within ``--error``, the least p50, and separately the least p90. Auto's targets: p50 <=
1.1x oracle-p50's, p90 <= 1.2x oracle-p90's, mean error within the budget, p90 <= plain
Dask's. Outputs: ``benchmarks/results/adaptive/hindsight.json`` (every job, and the
summary) and ``docs/adaptive/hindsight.md``.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
from distributed import Client, LocalCluster

import dask_bacc
from dask_bacc.exceptions import ApproximationWarning
from dask_bacc.testing import (
    Bimodal,
    SlowWorkers,
    clear_stragglers,
    inject_stragglers,
    smooth_blocks,
)

ROOT = Path(__file__).resolve().parent.parent
K = 8
N_WORKERS = 16
REGIMES = ("stationary", "heavy", "changing")
GRID_N = (10, 12, 14, 16)
GRID_K = tuple(range(8, 15))
QUICK_N = (12, 16)
QUICK_K = (9, 11)
RECOVERY_JOBS = 15  # auto jobs before and after the switch
PRE_WINDOW = 10  # jobs before the switch whose p50 is the reference
RECOVERY_FACTOR = 1.1
RECOVERY_HOLD = 3  # the next jobs that must stay within it
UNHIT = 0.5  # seconds: a job under this did not wait for a 1-s straggler


def mlp(block: np.ndarray, w1: np.ndarray, w2: np.ndarray, base: float) -> np.ndarray:
    """The mapped function: sleep ``base`` seconds, then a tanh layer and a linear one."""
    time.sleep(base)
    return np.tanh(block @ w1) @ w2


def workload(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = smooth_blocks(K, 16, 8, rng).reshape(K * 16, 8)
    w1 = rng.standard_normal((8, 16)) / np.sqrt(8)
    w2 = rng.standard_normal((16, 4)) / np.sqrt(16)
    exact = np.tanh(X @ w1) @ w2
    return X, w1, w2, exact


def _busy_threads(dask_worker: Any) -> int:
    return int(dask_worker.state.executing_count)


def wait_idle(client: Client, timeout: float = 15.0) -> float:
    """Wait until no worker thread is busy (stragglers cancelled and gone); the seconds."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        counts = client.run(_busy_threads, on_error="return")
        if all(isinstance(c, int) and c == 0 for c in counts.values()):
            break
        time.sleep(0.02)
    return time.perf_counter() - t0


#: fixed strategies besides the systematic spline's (N, k) grid: repetition's N, uncoded
FIXED_EXACT = ("uncoded", "rep-N10", "rep-N12", "rep-N14", "rep-N16")


def variant_kwargs(variant: str, budget: float) -> dict[str, Any]:
    """``auto``: the code, N and wait chosen; ``auto-spline``: N and wait chosen for the
    systematic spline; ``default``: no options (repetition, N = 2K); ``uncoded``;
    ``rep-N<n>``: repetition with n tasks; ``N<n>-k<k>``: the systematic spline, n tasks,
    first k results."""
    if variant == "auto":
        return {"code": "auto", "n_coded": "auto", "wait": "auto", "error": budget}
    if variant == "auto-spline":
        return {"code": "systematic-spline", "n_coded": "auto", "wait": "auto", "error": budget}
    if variant == "default":
        return {}
    if variant == "uncoded":
        return {"code": "uncoded"}
    if variant.startswith("rep-N"):
        return {"code": "repetition", "n_coded": int(variant[5:])}
    n, k = variant[1:].split("-k")
    return {"code": "systematic-spline", "n_coded": int(n), "wait": int(k)}


def grid_variants(quick: bool) -> list[str]:
    ns, ks = (QUICK_N, QUICK_K) if quick else (GRID_N, GRID_K)
    return [f"N{n}-k{k}" for n in ns for k in ks if k < n]


def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=float), q))


class Bench:
    """One cluster (one regime) and its jobs."""

    def __init__(self, client: Client, args: argparse.Namespace, data: tuple[Any, ...]):
        self.client = client
        self.args = args
        self.X, self.w1, self.w2, self.exact = data
        info = client.scheduler_info(n_workers=-1)["workers"]
        self.addr_name = {a: str(w["name"]) for a, w in info.items()}
        self.names = sorted(self.addr_name.values(), key=_name_key)

    def job(self, variant: str, regime: str, phase: str, rnd: int) -> dict[str, Any]:
        idle = wait_idle(self.client)
        kw = variant_kwargs(variant, self.args.error)
        t0 = time.perf_counter()
        job = dask_bacc.submit_coded(
            mlp,
            self.X,
            self.w1,
            self.w2,
            self.args.base,
            n_blocks=K,
            client=self.client,
            **kw,
        )
        out = job.result()
        seconds = time.perf_counter() - t0
        rep = job.report
        auto = rep.auto if variant == "auto" else None
        chosen = (auto or {}).get("chosen")
        err = float(np.linalg.norm(out - self.exact) / np.linalg.norm(self.exact))
        return {
            "regime": regime,
            "phase": phase,
            "variant": variant,
            "round": rnd,
            "seq": job.seq,
            "seconds": seconds,
            "error": err,
            "N": rep.N,
            "wait_target": rep.wait_target,
            "code": rep.code.get("name") if isinstance(rep.code, dict) else None,
            "chosen_N": None if chosen is None else chosen["N"],
            "chosen_k": None if chosen is None else chosen["k"],
            "chosen_code": None if chosen is None else chosen["code"],
            "predicted_error": None if chosen is None else chosen["error"],
            "predicted_time": None if chosen is None else chosen["time"],
            "calibration": None if auto is None else auto.get("calibration"),
            "model_jobs": None if auto is None else auto.get("model_jobs"),
            "reason": None if auto is None else auto.get("reason"),
            "time_to_decode": rep.time_to_decode,
            "trigger": rep.trigger,
            "error_estimate": rep.error_estimate,
            "returned": len(rep.returned),
            "straggled": len(rep.straggled),
            "workers": [self.worker_name(a) for a in rep.workers],
            "idle_wait": idle,
            # the plan without its alternatives (they would make the JSON ten times larger)
            "auto": None if auto is None else {k: auto[k] for k in auto if k != "alternatives"},
        }

    def worker_name(self, addr: str) -> str:
        return self.addr_name.get(addr, addr)


def _name_key(name: str) -> tuple[int, Any]:
    return (0, int(name)) if name.isdigit() else (1, name)


def slow_sets(names: list[str], seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Two disjoint sets of 3 worker names, seeded."""
    pick = np.random.default_rng([seed, 7]).permutation(len(names))
    a = tuple(sorted((names[i] for i in pick[:3]), key=_name_key))
    b = tuple(sorted((names[i] for i in pick[3:6]), key=_name_key))
    return a, b


def cluster() -> LocalCluster:
    return LocalCluster(
        n_workers=N_WORKERS, threads_per_worker=1, processes=False, dashboard_address=None
    )


def run_regime(
    regime: str, args: argparse.Namespace, data: tuple[Any, ...], log: Any
) -> dict[str, Any]:
    variants = ["auto", "auto-spline", "default", *FIXED_EXACT, *grid_variants(args.quick)]
    records: list[dict[str, Any]] = []
    out: dict[str, Any] = {"regime": regime, "variants": variants}
    seed = args.seed + REGIMES.index(regime)
    with cluster() as cl, Client(cl) as client:
        bench = Bench(client, args, data)
        if regime == "stationary":
            models = [Bimodal(p=0.1, delay=1.0)]
        elif regime == "heavy":
            models = [Bimodal(p=0.3, delay=1.0)]
        else:
            a, b = slow_sets(bench.names, args.seed)
            out["slow_sets"] = [list(a), list(b)]
            models = [SlowWorkers(names=a, delay=1.0), SlowWorkers(names=b, delay=1.0)]
        out["models"] = [repr(m) for m in models]
        inject_stragglers(models[0], seed=seed, client=client)
        t0 = time.perf_counter()
        for i in range(args.warmup):
            rec = bench.job("auto", regime, "warmup", -1 - i)
            records.append(rec)
        log(f"[{regime}] warm-up {args.warmup} auto jobs: {time.perf_counter() - t0:.0f}s")
        order_rng = np.random.default_rng([seed, 1])
        switch = args.rounds // 2
        for r in range(args.rounds):
            if len(models) > 1 and r == switch:
                clear_stragglers(client)
                inject_stragglers(models[1], seed=seed, client=client)
                log(f"[{regime}] round {r}: slow set -> {models[1].names}")
            t1 = time.perf_counter()
            for j in order_rng.permutation(len(variants)):
                phase = "rounds" if len(models) == 1 else ("before" if r < switch else "after")
                records.append(bench.job(variants[j], regime, phase, r))
            autos = [x for x in records if x["round"] == r and x["variant"] == "auto"]
            log(
                f"[{regime}] round {r + 1}/{args.rounds}: {time.perf_counter() - t1:.0f}s; "
                f"auto {autos[0]['seconds']:.3f}s (N={autos[0]['chosen_N']}, "
                f"k={autos[0]['chosen_k']}, err {autos[0]['error']:.3g})"
            )
        clear_stragglers(client)
    out["records"] = records
    if regime == "changing":
        runs = [run_recovery(args, data, log, i) for i in range(args.recovery_runs)]
        if runs:
            out["recovery"], out["recovery_more"] = runs[0], runs[1:]
    return out


def run_recovery(
    args: argparse.Namespace, data: tuple[Any, ...], log: Any, run: int = 0
) -> dict[str, Any]:
    """Auto jobs only, on a fresh cluster: 15 with slow set A, then 15 with set B."""
    n = 4 if args.quick else RECOVERY_JOBS
    records = []
    seed = args.seed + 10 + run
    with cluster() as cl, Client(cl) as client:
        bench = Bench(client, args, data)
        a, b = slow_sets(bench.names, args.seed + 100 * run)
        inject_stragglers(SlowWorkers(names=a, delay=1.0), seed=seed, client=client)
        for i in range(n):
            records.append(bench.job("auto", "changing", "recovery-before", i))
        clear_stragglers(client)
        inject_stragglers(SlowWorkers(names=b, delay=1.0), seed=seed, client=client)
        for i in range(n):
            records.append(bench.job("auto", "changing", "recovery-after", i))
        clear_stragglers(client)
    rec = recovery_of(records)
    rec.update(slow_sets=[list(a), list(b)], records=records, run=run)
    log(
        f"[recovery {run}] pre-change p50 {rec['pre_p50']:.3f}s, recovered at job "
        f"{rec['recovered_at']} after the switch (no 1-s wait from job {rec['unhit_at']})"
    )
    return rec


def recovery_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    before = [x["seconds"] for x in records if x["phase"] == "recovery-before"]
    after = [x["seconds"] for x in records if x["phase"] == "recovery-after"]
    pre = quantile(before[-PRE_WINDOW:], 0.5)
    limit = RECOVERY_FACTOR * pre

    def first_streak(limit: float) -> int | None:
        for i in range(len(after) - RECOVERY_HOLD):
            if all(t <= limit for t in after[i : i + RECOVERY_HOLD + 1]):
                return i + 1
        return None

    return {
        "pre_p50": pre,
        "limit": limit,
        "recovered_at": first_streak(limit),
        # a looser reading: the first job from which no auto job waited on a 1-s straggler
        "unhit_at": first_streak(UNHIT),
        "post_p50": quantile(after[1:], 0.5) if len(after) > 1 else None,
        "before": before,
        "after": after,
    }


# -- summary ----------------------------------------------------------------------------
def summarize(regime: dict[str, Any], budget: float) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    measured = [x for x in regime["records"] if x["phase"] != "warmup"]
    for v in regime["variants"]:
        rs = [x for x in measured if x["variant"] == v]
        if not rs:
            continue
        t = [x["seconds"] for x in rs]
        e = [x["error"] for x in rs]
        row = {
            "jobs": len(rs),
            "p50": quantile(t, 0.5),
            "p90": quantile(t, 0.9),
            "p99": quantile(t, 0.99),
            "mean_error": float(np.mean(e)),
            "max_error": float(np.max(e)),
            "N": collections.Counter(x["N"] for x in rs).most_common(1)[0][0],
            "k": collections.Counter(x["wait_target"] for x in rs).most_common(1)[0][0],
            # submit to result minus the job's own clock (which starts after auto's planning)
            "setup_ms": 1000 * quantile([x["seconds"] - x["time_to_decode"] for x in rs], 0.5),
        }
        if v.startswith("auto"):
            nk = collections.Counter((x["N"], x["wait_target"]) for x in rs)
            row["chosen"] = [[n, k, c] for (n, k), c in nk.most_common()]
            row["codes"] = dict(collections.Counter(str(x["chosen_code"]) for x in rs))
            row["defaults_ran"] = sum(x["chosen_N"] is None for x in rs)
            planned = [x for x in rs if x["chosen_N"] is not None]
            if planned:
                row["predicted_error"] = float(np.mean([x["predicted_error"] for x in planned]))
                row["calibration"] = float(np.mean([x["calibration"] for x in planned]))
        rows[v] = row
    grid = [v for v in regime["variants"] if v.startswith("N") and v in rows]
    ratios = [
        rows[v]["mean_error"] / ref
        for v in grid
        if (ref := reference_error(rows[v]["N"], rows[v]["k"])) > 0 and rows[v]["mean_error"] > 0
    ]
    fixed = [v for v in rows if not v.startswith("auto")]  # every fixed strategy run
    feasible = [v for v in fixed if rows[v]["mean_error"] <= budget]
    s: dict[str, Any] = {"rows": rows, "feasible": feasible}
    if ratios:  # what a calibration factor should be for this f and data, from the grid
        s["grid_error_over_reference"] = float(np.exp(np.mean(np.log(ratios))))
    if feasible:
        o50 = min(feasible, key=lambda v: rows[v]["p50"])
        o99 = min(feasible, key=lambda v: rows[v]["p99"])
        s["oracle_p50"], s["oracle_p99"] = o50, o99
        auto, default = rows.get("auto"), rows.get("default")
        if auto:
            s["auto_vs_oracle_p50"] = auto["p50"] / rows[o50]["p50"]
            s["auto_vs_oracle_p99"] = auto["p99"] / rows[o99]["p99"]
            if default:
                s["auto_vs_default_p90"] = auto["p90"] / default["p90"]
            s["auto_error_ok"] = auto["mean_error"] <= budget
    return s


def reference_error(N: int, k: int) -> float:
    """Auto's reference accuracy model (before calibration) for systematic-spline (N, k)."""
    from dask_bacc.codes import get_code
    from dask_bacc.codes.predict import expected_error

    return float(expected_error(get_code("systematic-spline", K, N), k))


def fmt_nk(row: dict[str, Any]) -> str:
    if "chosen" in row:
        return ", ".join(f"({n},{k})x{c}" for n, k, c in row["chosen"][:3])
    return f"({row['N']},{row['k']})"


def table(regime: dict[str, Any], s: dict[str, Any], top: int = 5) -> list[str]:
    rows = s["rows"]
    lines = [
        "| variant | jobs | p50 (s) | p90 (s) | p99 (s) | mean error | max error "
        "| setup (ms) | (N, k) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]

    def line(label: str, v: str) -> str:
        r = rows[v]
        return (
            f"| {label} | {r['jobs']} | {r['p50']:.3f} | {r['p90']:.3f} | {r['p99']:.3f} "
            f"| {r['mean_error']:.2e} | {r['max_error']:.2e} | {r['setup_ms']:.0f} "
            f"| {fmt_nk(r)} |"
        )

    for v in ("auto", "auto-spline", "default"):
        if v in rows:
            lines.append(line(f"**{v}**", v))
    if "oracle_p50" in s:
        lines.append(line(f"oracle-p50 ({s['oracle_p50']})", s["oracle_p50"]))
        lines.append(line(f"oracle-p99 ({s['oracle_p99']})", s["oracle_p99"]))
    shown = {s.get("oracle_p50"), s.get("oracle_p99")}
    for v in sorted(s["feasible"], key=lambda v: rows[v]["p50"]):
        if top <= 0:
            break
        if v not in shown:
            lines.append(line(v, v))
            top -= 1
    return lines


REGIME_TITLES = {"changing": "changing (moving slow set)"}
TARGET = 1.1  # issue 27: auto's p50 and p99 within 1.1x the oracle's in each regime


def targets_table(summaries: dict[str, dict[str, Any]], budget: float) -> list[str]:
    """Per regime: auto's p50 and p99 against the oracle's, as ratios, met or missed."""
    lines = [
        "| regime | auto p50 (s) | oracle-p50 (s) | auto / oracle p50 | "
        f"<= {TARGET}x | auto p99 (s) | oracle-p99 (s) | auto / oracle p99 | <= {TARGET}x "
        f"| auto mean error | <= budget {budget:g} |",
        "|---|--:|---|--:|:-:|--:|---|--:|:-:|--:|:-:|",
    ]
    for name, s in summaries.items():
        rows = s["rows"]
        auto = rows.get("auto")
        title = REGIME_TITLES.get(name, name)
        if auto is None or "oracle_p50" not in s:
            why = "no auto jobs" if auto is None else "no grid setting within the budget"
            lines.append(f"| {title} | {why} | | | | | | | | | |")
            continue
        o50, o99 = s["oracle_p50"], s["oracle_p99"]
        r50, r99 = s["auto_vs_oracle_p50"], s["auto_vs_oracle_p99"]

        def ok(r: float) -> str:
            return "met" if r <= TARGET else "**missed**"

        lines.append(
            f"| {title} | {auto['p50']:.3f} | {rows[o50]['p50']:.3f} ({o50}) | {r50:.2f} "
            f"| {ok(r50)} | {auto['p99']:.3f} | {rows[o99]['p99']:.3f} ({o99}) | {r99:.2f} "
            f"| {ok(r99)} | {auto['mean_error']:.3f} "
            f"| {'met' if s['auto_error_ok'] else '**missed**'} |"
        )
    return lines


def summary_line(name: str, s: dict[str, Any], budget: float, heavy: bool) -> str:
    if "auto_vs_oracle_p50" not in s:
        return f"{name}: no grid setting within the error budget, or no auto rows."
    a50, a99 = s["auto_vs_oracle_p50"], s["auto_vs_oracle_p99"]
    parts = [
        f"auto/oracle-p50 (p50) = {a50:.2f} ({'met' if a50 <= 1.1 else 'MISSED'} <= 1.1)",
        f"auto/oracle-p99 (p99) = {a99:.2f} ({'met' if a99 <= 1.1 else 'MISSED'} <= 1.1)",
    ]
    if "auto_vs_default_p90" in s:
        r = s["auto_vs_default_p90"]
        check = f" ({'met' if r <= 0.6 else 'MISSED'} <= 0.6)" if heavy else ""
        parts.append(f"auto/default (p90) = {r:.2f}{check}")
    err = s["rows"]["auto"]["mean_error"]
    parts.append(
        f"auto mean error {err:.2e} {'<=' if s['auto_error_ok'] else '>'} budget {budget:g} "
        f"({'met' if s['auto_error_ok'] else 'MISSED'})"
    )
    return f"**{name}**: " + "; ".join(parts) + "."


def grid_table(s: dict[str, Any]) -> list[str]:
    rows = s["rows"]
    lines = [
        "| setting | p50 (s) | p90 (s) | p99 (s) | mean error | within budget |",
        "|---|--:|--:|--:|--:|:-:|",
    ]
    for v, r in rows.items():
        if v.startswith("N"):
            ok = "yes" if v in s["feasible"] else "no"
            lines.append(
                f"| {v} | {r['p50']:.3f} | {r['p90']:.3f} | {r['p99']:.3f} "
                f"| {r['mean_error']:.2e} | {ok} |"
            )
    return lines


def write_report(payload: dict[str, Any], md: Path, png: Path) -> None:
    args = payload["config"]
    budget = args["error"]
    summaries = {r["regime"]: summarize(r, budget) for r in payload["regimes"]}
    payload["summary"] = summaries
    L = [
        "# Auto mode against hindsight",
        "",
        f"Command: `{payload['command']}`  ",
        f"Date: {payload['date']}; git commit {payload['commit']}; "
        f"wall {payload.get('wall_seconds', 0):.0f} s; Python {sys.version.split()[0]}.",
        "",
        f"LocalCluster of {N_WORKERS} workers x 1 thread (in-process), K = {K}, X (128, 8) "
        f"smooth, f = sleep {args['base']} s then tanh(X W1) W2; error budget "
        f"{budget:g}; {args['rounds']} interleaved rounds per regime after "
        f"{args['warmup']} auto warm-up jobs; a fresh cluster per regime. Times: submit "
        "to decoded output on the client. Error: ||out - f(X)||_F / ||f(X)||_F. The oracle: "
        "among the fixed grid settings (n_coded=N, wait=k) with mean error within the "
        "budget, the least p50 and the least p99 in hindsight. With "
        f"{args['rounds']} jobs per variant, p99 is close to the maximum.",
        "",
        "(N, k) of auto: the settings it ran, most frequent first, with their counts; of "
        "the others, N and the wait target from the job report.",
        "",
        "## Against the targets",
        "",
        f"Issue 27: in each regime auto's p50 and p99 within {TARGET}x the oracle's "
        "(oracle-p50 and oracle-p99 may be different settings); its mean error within the "
        "budget.",
        "",
        *targets_table(summaries, budget),
        "",
    ]
    for r in payload["regimes"]:
        name, s = r["regime"], summaries[r["regime"]]
        L += [f"## {REGIME_TITLES.get(name, name)}", "", f"Stragglers: {', '.join(r['models'])}."]
        if "slow_sets" in r:
            L.append(
                f"Slow set A {r['slow_sets'][0]} for rounds 1-{args['rounds'] // 2}, then "
                f"set B {r['slow_sets'][1]}."
            )
        L += ["", *table(r, s), "", summary_line(name, s, budget, name == "heavy"), ""]
        auto = s["rows"].get("auto", {})
        if "predicted_error" in auto:
            L += [
                f"Auto's error model: its chosen settings' predicted error averaged "
                f"{auto['predicted_error']:.3f} (mean calibration factor "
                f"{auto['calibration']:.2f}), their measured mean error "
                f"{auto['mean_error']:.3f}; over the fixed grid, measured mean error / the "
                f"uncalibrated reference model is {s.get('grid_error_over_reference', 0):.2f} "
                "(geometric mean): the factor a calibration should find for this f.",
                "",
            ]
        for rec in [r["recovery"], *r.get("recovery_more", [])] if "recovery" in r else []:
            L += recovery_lines(rec)
    L += ["## Full grid", ""]
    for r in payload["regimes"]:
        L += [f"### {r['regime']}", "", *grid_table(summaries[r["regime"]]), ""]
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text("\n".join(L))
    plot(payload, summaries, png)


def recovery_lines(rec: dict[str, Any]) -> list[str]:
    rec = {**rec, **recovery_of(rec["records"])}  # recomputed: older JSON lacks fields
    at = rec["recovered_at"]
    ok = at is not None and at <= 10
    post = rec.get("post_p50")
    return [
        f"Recovery run {rec.get('run', 0) + 1} (fresh cluster, auto jobs only; slow set A "
        f"{rec['slow_sets'][0]} then B {rec['slow_sets'][1]}): pre-change p50 of the last "
        f"{PRE_WINDOW} jobs {rec['pre_p50']:.3f} s, limit {RECOVERY_FACTOR}x = "
        f"{rec['limit']:.3f} s; recovered at job {at} after the switch "
        f"({'met' if ok else 'MISSED'}: within 10 jobs). Looser reading: no auto job waited "
        f"on a 1-s straggler from job {rec.get('unhit_at')} on; p50 of jobs 2-"
        f"{len(rec['after'])} after the switch "
        + ("-" if post is None else f"{post:.3f} s ({post / rec['pre_p50']:.2f}x)")
        + ".",
        "",
        "| job | " + " | ".join(str(i + 1) for i in range(len(rec["before"]))) + " |",
        "|---|" + "--:|" * len(rec["before"]),
        "| before (s) | " + " | ".join(f"{t:.3f}" for t in rec["before"]) + " |",
        "| before (N,k) | "
        + " | ".join(
            f"{x['N']},{x['wait_target']}"
            for x in rec["records"]
            if x["phase"] == "recovery-before"
        )
        + " |",
        "| after (s) | " + " | ".join(f"{t:.3f}" for t in rec["after"]) + " |",
        "| after (N,k) | "
        + " | ".join(
            f"{x['N']},{x['wait_target']}" for x in rec["records"] if x["phase"] == "recovery-after"
        )
        + " |",
        "",
    ]


def plot(payload: dict[str, Any], summaries: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = payload["regimes"]
    rec = next((r["recovery"] for r in regimes if "recovery" in r), None)
    n = len(regimes) + (rec is not None)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 4), squeeze=False)
    for ax, r in zip(axes[0], regimes, strict=False):
        s = summaries[r["regime"]]
        rows = s["rows"]
        for v, row in rows.items():
            if v.startswith("N"):
                ok = v in s["feasible"]
                ax.scatter(
                    row["p50"], row["p99"], c="0.6" if ok else "none", edgecolors="0.6", s=22
                )
        marks = [("auto", "tab:red", "*", 160), ("default", "tab:blue", "s", 60)]
        for v, color, m, size in marks:
            if v in rows:
                ax.scatter(rows[v]["p50"], rows[v]["p99"], c=color, marker=m, s=size, label=v)
        for key, color, m in (("oracle_p50", "tab:green", "^"), ("oracle_p99", "tab:purple", "v")):
            if key in s:
                v = s[key]
                ax.scatter(
                    rows[v]["p50"],
                    rows[v]["p99"],
                    facecolors="none",
                    edgecolors=color,
                    marker=m,
                    s=110,
                    label=f"{key.replace('_', '-')} {v}",
                )
        ax.set_title(r["regime"])
        ax.set_xlabel("p50 (s)")
        ax.set_ylabel("p99 (s)")
        ax.legend(fontsize=7, title="grey: grid (hollow: over budget)", title_fontsize=7)
    if rec is not None:
        ax = axes[0][-1]
        t = rec["before"] + rec["after"]
        x = np.arange(1, len(t) + 1) - len(rec["before"])
        ax.plot(x, t, "o-", c="tab:red", ms=4)
        ax.axvline(0.5, c="0.3", ls="--", lw=1)
        ax.axhline(rec["limit"], c="tab:green", ls=":", lw=1, label="1.1x pre-change p50")
        ax.set_title("changing: auto jobs around the switch")
        ax.set_xlabel("job (1 = first after the switch)")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)


# -- the regime map in hindsight (issue 27, item 5) ------------------------------------------
MAP_STRATEGIES = ("plain", "repetition", "speculative", "systematic-spline", "berrut", "auto")
MAP_P50 = 1.1  # auto's p50 at most this times the oracle's
MAP_P90 = 1.2  # auto's p90 at most this times the oracle's (and at most plain's)
REGIMES_PY = Path(__file__).resolve().parent / "regimes.py"


def load_regimes() -> Any:
    """benchmarks/regimes.py as a module (benchmarks/ is not a package)."""
    import importlib.util

    name = "bacc_regimes_hindsight"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REGIMES_PY)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    import cloudpickle

    # its functions that run on the workers (the idle poll) go by value: the workers cannot
    # import this module by its name (as a script's __main__ goes by value)
    cloudpickle.register_pickle_by_value(mod)
    return mod


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def hindsight(
    cells: list[Any], jobs: list[Any], strategies: tuple[str, ...], budget: float
) -> dict[str, Any]:
    """Per cell of the map: auto against the best fixed strategy in hindsight.

    ``cells`` and ``jobs`` are regimes.py's ``Cell`` and ``Job`` records (cell i's jobs
    have ``cell == i``). Per cell and strategy: p50, p90 (of the jobs that answered),
    mean error, failed jobs. The oracle is, among the strategies other than auto with no
    failed job and a mean error within ``budget``, the one of least p50
    (``oracle_p50``), and separately the one of least p90 (``oracle_p90``). Auto's
    targets: p50 <= 1.1x the oracle's, p90 <= 1.2x the oracle's, mean error <= budget,
    p90 <= plain Dask's. A target that cannot be checked (no auto jobs, no oracle, no
    plain) is missed (``False``), and so is every time target when an auto job failed.
    """
    R = load_regimes()
    summary = R.summarize(cells, jobs, strategies)
    rows = []
    for i, srow in enumerate(summary):
        here = [j for j in jobs if j.cell == i]
        per: dict[str, dict[str, Any]] = {}
        for s, x in srow["strategies"].items():
            errs = [j.error for j in here if j.strategy == s and j.latency is not None]
            errs = [e for e in errs if e is not None]
            per[s] = {
                "jobs": x["jobs"],
                "failed": x["failed"],
                "failure": x["failure"],
                "p50": x["p50"],
                "p90": x["p90"],
                "mean_error": float(np.mean(errs)) if errs else None,
            }
            per[s]["within_budget"] = (
                per[s]["mean_error"] is not None and per[s]["mean_error"] <= budget
            )
        fixed = {
            s: r
            for s, r in per.items()
            if s != "auto" and r["jobs"] and not r["failed"] and r["p50"] is not None
        }
        feasible = [s for s, r in fixed.items() if r["within_budget"]]
        o50 = min(feasible, key=lambda s: per[s]["p50"]) if feasible else None
        o90 = min(feasible, key=lambda s: per[s]["p90"]) if feasible else None
        auto = per.get("auto") if per.get("auto", {}).get("jobs") else None
        a50 = auto["p50"] if auto else None
        a90 = auto["p90"] if auto else None
        plain90 = per["plain"]["p90"] if "plain" in per and not per["plain"]["failed"] else None
        row: dict[str, Any] = {
            "label": srow["label"],
            "cell": srow["cell"],
            "strategies": per,
            "feasible": feasible,
            "oracle_p50": o50,
            "oracle_p90": o90,
            "auto_p50": a50,
            "auto_p90": a90,
            "auto_mean_error": auto["mean_error"] if auto else None,
            "auto_failed": auto["failed"] if auto else None,
            "oracle_p50_value": per[o50]["p50"] if o50 else None,
            "oracle_p90_value": per[o90]["p90"] if o90 else None,
            "plain_p90": plain90,
        }
        row["p50_ratio"] = _ratio(a50, row["oracle_p50_value"])
        row["p90_ratio"] = _ratio(a90, row["oracle_p90_value"])
        row["p90_vs_plain"] = _ratio(a90, plain90)
        timed = auto is not None and not auto["failed"]
        row["met"] = {
            "p50": timed and row["p50_ratio"] is not None and row["p50_ratio"] <= MAP_P50,
            "p90": timed and row["p90_ratio"] is not None and row["p90_ratio"] <= MAP_P90,
            "error": bool(auto and auto["within_budget"]),
            "plain": timed and row["p90_vs_plain"] is not None and row["p90_vs_plain"] <= 1.0,
        }
        row["all_met"] = all(row["met"].values())
        chosen = collections.Counter(
            j.chosen or "none recorded"
            for j in here
            if j.strategy == "auto" and j.latency is not None
        )
        row["chosen"] = dict(chosen.most_common())
        rows.append(row)
    return {
        "budget": budget,
        "targets": {"p50": MAP_P50, "p90": MAP_P90, "p90_vs_plain": 1.0},
        "cells": rows,
        "cells_met": sum(r["all_met"] for r in rows),
        "cells_total": len(rows),
    }


def _x(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _mark(v: float | None, ok: bool, fmt: str = "{:.2f}") -> str:
    return f"{_x(v, fmt)} {'met' if ok else '**missed**'}"


def hindsight_markdown(h: dict[str, Any], meta: dict[str, Any], numbers: list[int]) -> str:
    """The tables of docs/adaptive/hindsight.md."""
    budget = h["budget"]
    L = [
        "# Auto mode against hindsight on the regime map",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; git commit {meta['commit']}"
        + (
            " (with uncommitted changes to dask_bacc/ or benchmarks/)"
            if meta.get("uncommitted")
            else ""
        )
        + f"; {meta['cpus']} cores; "
        f"wall {_x(meta.get('wall_seconds'), '{:.0f}')} s; Python {meta['python']}.",
        "",
        f"The cells of the quick regime map (`benchmarks/regimes.py`, docs/regimes.md): "
        f"a `dask scheduler` and one-thread `dask worker` processes over "
        f"{meta.get('hosts', 4)} hosts, {meta['rounds']} rounds per cell, every strategy "
        f"({', '.join(meta['strategies'])}) run once per round in a shuffled order, each "
        f'job on an idle cluster. Auto is `code`, `n_coded`, `wait` = `"auto"` with '
        + (
            f"`error={meta['budget']:g}`."
            if "budget" in meta
            else "its default error budget (`bacc.auto.error`: not recorded in this run)."
        )
        + " The oracle is the best fixed strategy in hindsight: among "
        f"the strategies other than auto with no failed job and a mean error within the "
        f"budget {budget:g} (inference: class disagreement), the least p50 (oracle-p50) "
        "and, separately, the least p90 (oracle-p90). Times: submit to answer. Targets: "
        f"auto's p50 <= {MAP_P50}x oracle-p50's, p90 <= {MAP_P90}x oracle-p90's, mean "
        "error <= the budget, p90 <= plain Dask's.",
        "",
        f"**Cells meeting all four targets: {h['cells_met']} of {h['cells_total']}.**",
        "",
        "| # | cell | auto p50 (s) | oracle-p50 (s) | auto / oracle p50 | auto p90 (s) "
        "| oracle-p90 (s) | auto / oracle p90 | auto p90 / plain p90 | auto mean error "
        "| all targets |",
        "|--:|---|--:|---|---|--:|---|---|---|---|:-:|",
    ]
    for n, r in zip(numbers, h["cells"], strict=True):
        m = r["met"]
        fail = f" ({r['auto_failed']} failed)" if r["auto_failed"] else ""
        L.append(
            f"| {n} | {r['label']} | {_x(r['auto_p50'], '{:.3f}')}{fail} "
            f"| {_x(r['oracle_p50_value'], '{:.3f}')} ({r['oracle_p50'] or 'none'}) "
            f"| {_mark(r['p50_ratio'], m['p50'])} | {_x(r['auto_p90'], '{:.3f}')} "
            f"| {_x(r['oracle_p90_value'], '{:.3f}')} ({r['oracle_p90'] or 'none'}) "
            f"| {_mark(r['p90_ratio'], m['p90'])} | {_mark(r['p90_vs_plain'], m['plain'])} "
            f"| {_mark(r['auto_mean_error'], m['error'], '{:.2g}')} "
            f"| {'yes' if r['all_met'] else '**no**'} |"
        )
    L += [
        "",
        "## What auto chose",
        "",
        "Per cell, auto's settings over its answered jobs (code, N, k; most frequent "
        "first). *None recorded*: the job's report had no chosen setting (the model had "
        "not learned enough and the defaults ran; a regimes.py run before this benchmark "
        "did not record the DataFrame cell's choices).",
        "",
        "| # | cell | chosen (jobs) |",
        "|--:|---|---|",
    ]
    for n, r in zip(numbers, h["cells"], strict=True):
        ch = ", ".join(f"{c} x{k}" for c, k in r["chosen"].items()) or "-"
        L.append(f"| {n} | {r['label']} | {ch} |")
    L += ["", "## Every strategy, per cell", ""]
    for n, r in zip(numbers, h["cells"], strict=True):
        L += [
            f"**{n}. {r['label']}**",
            "",
            "| strategy | jobs | failed | p50 (s) | p90 (s) | mean error | within budget |",
            "|---|--:|--:|--:|--:|--:|:-:|",
        ]
        for s, x in r["strategies"].items():
            tag = []
            if s == r["oracle_p50"]:
                tag.append("oracle-p50")
            if s == r["oracle_p90"]:
                tag.append("oracle-p90")
            name = s + (f" ({', '.join(tag)})" if tag else "")
            if not x["jobs"]:
                L.append(f"| {name} | 0 | - | - | - | - | not run |")
                continue
            failed = str(x["failed"]) + (f": {x['failure']}" if x["failed"] else "")
            L.append(
                f"| {name} | {x['jobs']} | {failed} | {_x(x['p50'], '{:.3f}')} "
                f"| {_x(x['p90'], '{:.3f}')} | {_x(x['mean_error'], '{:.2g}')} "
                f"| {'yes' if x['within_budget'] else 'no'} |"
            )
        L.append("")
    return "\n".join(L)


def run_map_mode(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--map``: the quick regime map's cells, auto against the oracle per cell."""
    import os
    import platform
    import signal

    R = load_regimes()
    stem = args.name or "hindsight"
    path = args.out / f"{stem}.json"
    md = args.docs / f"{stem}.md"
    budget = args.error
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        cells = [R.Cell(**c) for c in data["cells"]]
        jobs = [R.Job(**j) for j in data["jobs"]]
        strategies = tuple(data["strategies"])
        meta = data["meta"]
        meta.setdefault("strategies", list(strategies))
        numbers = meta.get("cell_numbers", list(range(len(cells))))
        budget = meta.get("budget", budget)
    else:
        # a SIGTERM (timeout, kill) unwinds like Ctrl-C, so the test bed's processes go too
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        from tqdm.auto import tqdm

        chosen = args.strategies or ",".join(MAP_STRATEGIES)
        strategies = tuple(x for x in chosen.split(",") if x)
        unknown = set(strategies) - set(R.STRATEGIES)
        if unknown or "plain" not in strategies or "auto" not in strategies:
            parser.error(f"--strategies from {R.STRATEGIES}, with plain and auto; got {chosen}")
        cells = R.quick_cells()
        numbers = list(range(len(cells)))
        if args.cells:
            numbers = [int(i) for i in args.cells.split(",")]
            cells = [cells[i] for i in numbers]
        rounds = args.rounds if args.rounds is not None else 10
        jobs: list[Any] = []
        meta = {
            "command": "python benchmarks/adaptive.py " + " ".join(sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(),
            "uncommitted": uncommitted(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "rounds": rounds,
            "seed": args.seed,
            "budget": budget,
            "hosts": R.HOSTS,
            "strategies": list(strategies),
            "cell_numbers": numbers,
            "wall_seconds": None,
        }
        t0 = time.perf_counter()
        args.out.mkdir(parents=True, exist_ok=True)

        def save() -> None:  # after every cell: an interrupted run keeps what it measured
            meta["wall_seconds"] = round(time.perf_counter() - t0, 1)
            record = {
                "meta": meta,
                "cells": [asdict(c) for c in cells],
                "strategies": list(strategies),
                "jobs": [asdict(j) for j in jobs],
            }
            path.write_text(json.dumps(record, indent=1))

        bar = tqdm(total=R.map_jobs(cells, rounds, strategies), desc="hindsight", unit="job")
        testbed = argparse.Namespace(emulate_hosts=False, bandwidth=None)
        R.run_map(
            cells,
            rounds,
            args.seed,
            strategies,
            testbed,
            bar,
            jobs,
            after_cell=save,
            auto_error=budget,
        )
        bar.close()
    ran = sorted({j.cell for j in jobs})  # an interrupted run: the cells it finished
    numbers = [numbers[i] for i in ran]
    cells = [cells[i] for i in ran]
    jobs = [replace(j, cell=ran.index(j.cell)) for j in jobs]
    h = hindsight(cells, jobs, strategies, budget)
    text = hindsight_markdown(h, meta, numbers)
    if not args.from_json:
        record = json.loads(path.read_text())
        record["hindsight"] = h
        path.write_text(json.dumps(record, indent=1))
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    print(text)
    print(f"wrote {md}" + ("" if args.from_json else f", {path}"))
    return 0


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def uncommitted() -> bool:
    """Whether tracked files under dask_bacc/ or benchmarks/ differ from the commit."""
    try:
        out = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                "dask_bacc",
                "benchmarks",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        return bool(out.stdout.strip())
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds per regime (20) or cell (10)"
    )
    parser.add_argument("--warmup", type=int, default=10, help="auto warm-up jobs per regime")
    parser.add_argument("--base", type=float, default=0.05, help="seconds f sleeps per block")
    parser.add_argument("--error", type=float, default=0.1, help="auto's error budget")
    parser.add_argument("--regimes", nargs="+", choices=REGIMES, default=list(REGIMES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, small grid")
    parser.add_argument("--recovery-runs", type=int, default=3, help="recovery sequences (0: none)")
    parser.add_argument("--name", default=None, help="output stem (default by mode)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks/results/adaptive", help="JSON directory"
    )
    parser.add_argument("--docs", type=Path, default=ROOT / "docs/adaptive", help="md/png dir")
    parser.add_argument("--from-json", type=Path, help="only rebuild the report from a JSON")
    parser.add_argument(
        "--map", action="store_true", help="the quick regime map's cells, auto against hindsight"
    )
    parser.add_argument("--cells", default=None, help="--map: comma-separated cell numbers")
    parser.add_argument(
        "--strategies",
        default=None,
        help=f"--map: comma-separated, with plain and auto (default {','.join(MAP_STRATEGIES)})",
    )
    args = parser.parse_args(argv)
    if args.map:
        if args.quick or args.regimes != list(REGIMES):
            parser.error("--quick and --regimes are for the three regimes, not --map")
        return run_map_mode(args, parser)
    if args.cells or args.strategies:
        parser.error("--cells and --strategies go with --map")
    if args.rounds is None:
        args.rounds = 20
    stem = args.name or ("adaptive-quick" if args.quick else "adaptive")
    md = args.docs / f"{args.name or ('benchmark-quick' if args.quick else 'benchmark')}.md"
    png = md.with_suffix(".png")
    if args.from_json:
        payload = json.loads(args.from_json.read_text())
        write_report(payload, md, png)
        print(f"wrote {md}, {png}")
        return 0
    if args.quick:
        args.rounds, args.warmup = 2, min(args.warmup, 4)
        args.recovery_runs = min(args.recovery_runs, 1)
    warnings.filterwarnings("ignore", category=ApproximationWarning)
    data = workload(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{stem}.json"
    payload: dict[str, Any] = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "regimes": [],
    }
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"{time.perf_counter() - t0:7.0f}s {msg}", flush=True)

    for regime in args.regimes:
        payload["regimes"].append(run_regime(regime, args, data, log))
        payload["wall_seconds"] = time.perf_counter() - t0
        path.write_text(json.dumps(payload, indent=1, default=str))  # after every regime
        write_report(payload, md, png)
        log(f"[{regime}] done; wrote {path}")
    path.write_text(json.dumps(payload, indent=1, default=str))
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
