"""Small-K calibration: is the error estimate an honest bound at K = 2, 3, 4?

The accuracy benchmark (``benchmarks/accuracy.py``) calibrates the estimate at K >= 4 (its
code comparison at K = 8). This one measures what a user of the README's setup gets:
``tanh(X @ W)`` with X of 16 features, i.i.d. normal rows ("random", the README's data) or
a slowly varying signal ("smooth", :func:`dask_bacc.codes.predict.smooth_signal`), W
16 x 4 standard normal, about 4000 rows split into K blocks; K = 2, 3, 4 and N = 2K, 3K;
codes systematic-spline (the default), spline, berrut and systematic-berrut.

Straggler sets (``returned``, the results the decode uses):

- ``one-out``: every set of N - 1 results (each share straggling in turn, the rest
  collected: the default wait plus its grace period);
- ``at-target``: every set of ``wait-target = ceil(bacc.wait.<code> * N)`` results (the
  default wait, 0.75 of N, without grace; for N = 4 the same as one-out);
- ``random``: random sets of a size drawn from [max(K, 3), N - 1] (``--random`` per cell).

Each set is decoded from fresh data (``--draws`` data draws per set). The estimate is
computed exactly as a job computes it (:func:`dask_bacc.runtime.quality.estimate_decode`:
the count sketches of ``bacc.accuracy.sketch`` = 256 numbers, the estimate, the
consistency check and its addition), the true error as ``||decoded - f(X)|| / ||f(X)||``
on the full results. A case is *honest* when the estimate is at least half the true error,
or when the job says it cannot estimate (``error_estimate`` ``None``: it warns); exact
decodes (true error below 1e-12 with an estimate of 0) are counted apart. The table gives,
per (code, K, N, data), the approximate cases, the share with a numeric estimate >= 0.5 x
the true error, the share flagged unknown, the share honest, the worst ratio estimate /
true error and the share of cases with true error above ``bacc.warn-error`` (0.1) that
the job warns about.

``--held`` (issue 41) runs another grid instead: every systematic and local code
(:data:`HELD_CODES`), K = 2, 3, 4, every N from K + 1 to 2K, each block's own task held in
turn (its systematic share; for the plain local code the share nearest its data point,
which reads it with the largest weight), decoded from every set a job with the default
wait could decode from while that task is late: every set of ``wait-target`` to N - 1
results without it (``at-target``: the wait's target; ``grace``: more results collected in
its grace period; ``one-out``: all but the held one), ``--draws`` data draws each (16 by
default here; random and smooth rows). A decode is *silent* when its true error exceeds
both 2x the estimate and ``bacc.warn-error`` while the job does not warn (the estimate is
a number at most ``bacc.warn-error``); a missing estimate warns. The target is 0 silent
decodes in every cell.

Usage::

    python benchmarks/small_k.py [--draws 4] [--random 40] [--out benchmarks/results/small_k]
    python benchmarks/small_k.py --estimate-rev 0874b27 --name before  # the estimator then
    python benchmarks/small_k.py --before-after benchmarks/results/small_k/{before,after}.json
    python benchmarks/small_k.py --held [--draws 16] [--name grid]      # ~30 s on 2 cores
    python benchmarks/small_k.py --before-after benchmarks/results/small_k/grid_{before,after}.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dask_bacc import config
from dask_bacc.codes import get_code
from dask_bacc.codes.estimate import count_sketch
from dask_bacc.codes.predict import smooth_signal
from dask_bacc.runtime.quality import estimate_decode

CODES = ("systematic-spline", "spline", "berrut", "systematic-berrut")
KS = (2, 3, 4)
REDUNDANCY = (2, 3)
KINDS = ("random", "smooth")
FEATURES, OUTPUTS, TOTAL_ROWS = 16, 4, 4000
EXACT_TOL = 1e-12


def draw(kind: str, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """K input blocks (K, rows, 16) and W (16, 4), the README's shapes."""
    rows = TOTAL_ROWS // K
    if kind == "random":
        X = rng.standard_normal((K, rows, FEATURES))
    else:
        X = smooth_signal(K, rows, FEATURES, rng)
    return X, rng.standard_normal((FEATURES, OUTPUTS))


def wait_target(name: str, K: int, N: int) -> int:
    """The default wait's target (``bacc.wait.<code name>``, systematic codes included)."""
    code_name = get_code(name, K, N).name
    fraction = float(config.get("wait").get(code_name, config.get("wait.other")))
    return max(1, math.ceil(fraction * N - 1e-9))


def straggler_sets(
    name: str, K: int, N: int, n_random: int, rng: np.random.Generator
) -> Iterator[tuple[str, list[int]]]:
    for lost in range(N):
        yield "one-out", [i for i in range(N) if i != lost]
    target = wait_target(name, K, N)
    if target < N - 1:
        for subset in itertools.combinations(range(N), target):
            yield "at-target", list(subset)
    lo = min(max(K, 3), N - 1)
    for _ in range(n_random):
        size = int(rng.integers(lo, N))  # lo .. N-1
        yield "random", sorted(int(i) for i in rng.choice(N, size, replace=False))


#: The systematic and local codes of the registry (``--held``): the three systematic
#: variants and the local-support bspline, whose blocks each have a task of their own
HELD_CODES = ("systematic-spline", "systematic-berrut", "systematic-bspline", "bspline")


def own_share(code: Any, j: int) -> int:
    """Block j's own task: its systematic share, or (a code without them) the share
    whose point is nearest its data point (the one that reads it with the largest weight)."""
    if getattr(code, "systematic_workers", None) is not None:
        return int(code.systematic_workers[j])
    return int(np.argmin(np.abs(code.worker_points - code.data_points[j])))


def held_sets(name: str, K: int, N: int, held: int) -> Iterator[tuple[str, list[int]]]:
    """The result sets a job with the default wait decodes from while task ``held`` is
    late: every set of ``wait-target`` (its target) to N - 1 (grace collected all the
    others) results without it that the code can decode from."""
    code = get_code(name, K, N)
    others = [i for i in range(N) if i != held]
    lo = min(wait_target(name, K, N), N - 1)
    for size in range(N - 1, lo - 1, -1):
        label = "one-out" if size == N - 1 else "at-target" if size == lo else "grace"
        for subset in itertools.combinations(others, size):
            if code.can_decode(list(subset)):
                yield label, list(subset)


def silent(case: dict[str, Any], limit: float) -> bool:
    """True error above both 2x the estimate and ``bacc.warn-error``, and no warning."""
    est = case["estimate"]
    return est is not None and est <= limit and case["true"] > max(2.0 * est, limit)


def summarize_held(cases: list[dict[str, Any]]) -> dict[str, Any]:
    limit = float(config.get("warn-error"))
    approx = [c for c in cases if not (c["true"] < EXACT_TOL and c["estimate"] == 0.0)]
    numeric = [c for c in approx if c["estimate"] is not None]
    ratios = [c["estimate"] / c["true"] for c in numeric if c["true"] > 0]
    return {
        "decodes": len(approx),
        "silent": sum(silent(c, limit) for c in approx),
        "below_half": sum(c["estimate"] < 0.5 * c["true"] for c in numeric),
        "no_estimate": len(approx) - len(numeric),
        "above_warn": sum(c["true"] > limit for c in approx),
        "worst_ratio": min(ratios) if ratios else None,
        "worst_silent_true": max((c["true"] for c in approx if silent(c, limit)), default=None),
    }


def run_held(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--held`` grid: per (code, K, N, held block), every set of :func:`held_sets`."""
    rows, every = [], []
    for c, name in enumerate(HELD_CODES):
        for K in KS:
            for N in range(K + 1, 2 * K + 1):
                code = get_code(name, K, N)
                for j in range(K):
                    held = own_share(code, j)
                    cases = []
                    for s, (label, returned) in enumerate(held_sets(name, K, N, held)):
                        for kind in KINDS:
                            for d in range(args.draws):
                                key = [args.seed, c, K, N, j, s, KINDS.index(kind), d]
                                seed = int(np.random.default_rng(key).integers(2**63))
                                case = run_case(name, K, N, kind, returned, seed)
                                case.update(code=name, set=label, returned=returned, data=kind)
                                cases.append(case)
                    every += cases
                    row = {"code": name, "K": K, "N": N, "block": j, "held": held}
                    rows.append(row | {"summary": summarize_held(cases)})
                    print(f"{name} K={K} N={N} block {j} (task {held}): {rows[-1]['summary']}")
    by_code = {name: summarize_held([c for c in every if c["code"] == name]) for name in HELD_CODES}
    return {"grid": "held", "rows": rows, "by_code": by_code, "total": summarize_held(every)}


def run_case(name: str, K: int, N: int, kind: str, returned: list[int], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    X, W = draw(kind, K, rng)
    code = get_code(name, K, N)
    truth = np.tanh(X @ W)
    shares = code.encode(X)
    results = np.tanh(shares[returned] @ W)
    decoded = code.decode(results, returned)
    true = float(np.linalg.norm(decoded - truth) / np.linalg.norm(truth))
    size = int(config.get("accuracy.sketch"))
    sketch_seed = int(rng.integers(0, 2**32))  # a job's seed comes from its token
    Y = np.stack([count_sketch(r, size, sketch_seed) for r in results])
    est, found, _ = estimate_decode(code, Y, list(returned))
    estimate = est.overall if math.isfinite(est.overall) else None
    return {
        "true": true,
        "estimate": estimate,
        "method": est.method,
        "exact": code.is_exact(returned),
        "suspects": found.flagged,
    }


def summarize(cases: list[dict[str, Any]]) -> dict[str, Any]:
    limit = config.get("warn-error")
    approx = [c for c in cases if not (c["true"] < EXACT_TOL and c["estimate"] == 0.0)]
    numeric = [c for c in approx if c["estimate"] is not None]
    ok = [c for c in numeric if c["estimate"] >= 0.5 * c["true"]]
    unknown = [c for c in approx if c["estimate"] is None]
    ratios = [c["estimate"] / c["true"] for c in numeric if c["true"] > 0]
    big = [c for c in approx if limit is not None and c["true"] > float(limit)]
    warned = [c for c in big if c["estimate"] is None or c["estimate"] > float(limit)]
    n = len(approx)
    return {
        "cases": len(cases),
        "approximate": n,
        "numeric_ge_half": len(ok) / len(numeric) if numeric else None,
        "unknown": len(unknown) / n if n else None,
        "honest": (len(ok) + len(unknown)) / n if n else None,
        "worst_ratio": min(ratios) if ratios else None,
        "median_ratio": float(np.median(ratios)) if ratios else None,
        "above_warn": len(big),
        "warned": len(warned) / len(big) if big else None,
    }


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| code | K | N | data | cases | approximate | est >= 0.5x true | unknown | honest "
        "| worst ratio | median ratio | true > 0.1 | of those warned |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        s = row["summary"]
        lines.append(
            f"| {row['code']} | {row['K']} | {row['N']} | {row['data']} | {s['cases']} | "
            f"{s['approximate']} | {_f(s['numeric_ge_half'])} | {_f(s['unknown'])} | "
            f"{_f(s['honest'])} | {_f(s['worst_ratio'])} | {_f(s['median_ratio'])} | "
            f"{s['above_warn']} | {_f(s['warned'])} |"
        )
    lines += ["", "By straggler set (all codes, K, N and data pooled):", ""]
    lines.append("| code | set | approximate | est >= 0.5x true | unknown | honest | worst ratio |")
    lines.append("|---|---|---|---|---|---|---|")
    for key, s in result["by_set"].items():
        code, kind = key.split("/")
        lines.append(
            f"| {code} | {kind} | {s['approximate']} | {_f(s['numeric_ge_half'])} | "
            f"{_f(s['unknown'])} | {_f(s['honest'])} | {_f(s['worst_ratio'])} |"
        )
    t = result["total"]
    lines += [
        "",
        f"All: {t['approximate']} approximate decodes of {t['cases']}; estimate >= 0.5x true "
        f"in {_f(t['numeric_ge_half'])} of those with an estimate, unknown (warned) "
        f"{_f(t['unknown'])}, honest {_f(t['honest'])}; true error > 0.1 warned in "
        f"{_f(t['warned'])} of {t['above_warn']}.",
    ]
    return "\n".join(lines)


def before_after(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The docs' table: per (code, K, N, data), the share of approximate decodes whose
    estimate is >= 0.5x the true error (before) and honest (after: >= 0.5x, or no
    estimate and a warning), the share without an estimate, the worst ratios."""
    lines = [
        "| code | K | N | data | decodes | >= 0.5x before | honest after | of which unknown "
        "| worst ratio before | after | median ratio before | after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    old = {(r["code"], r["K"], r["N"], r["data"]): r["summary"] for r in before["rows"]}
    for row in after["rows"]:
        a = row["summary"]
        b = old.get((row["code"], row["K"], row["N"], row["data"]), {})
        lines.append(
            f"| {row['code']} | {row['K']} | {row['N']} | {row['data']} | {a['approximate']} | "
            f"{_f(b.get('numeric_ge_half'), 2)} | {_f(a['honest'], 2)} | {_f(a['unknown'], 2)} | "
            f"{_f(b.get('worst_ratio'), 2)} | {_f(a['worst_ratio'], 2)} | "
            f"{_f(b.get('median_ratio'), 2)} | {_f(a['median_ratio'], 2)} |"
        )
    tb, ta = before["total"], after["total"]
    lines += [
        "",
        f"All {ta['approximate']} approximate decodes: >= 0.5x before {_f(tb['honest'])}, honest "
        f"after {_f(ta['honest'])} (estimate >= 0.5x in {_f(ta['numeric_ge_half'])} of those "
        f"with one, no estimate in {_f(ta['unknown'])}); true error above 0.1 warned "
        f"{_f(tb['warned'])} before, {_f(ta['warned'])} after.",
    ]
    return "\n".join(lines)


def markdown_held(result: dict[str, Any]) -> str:
    lines = [
        "| code | K | N | block | held task | decodes | silent | est < 0.5x true | no estimate "
        "| true > 0.1 | worst ratio | worst silent true error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        s = row["summary"]
        lines.append(
            f"| {row['code']} | {row['K']} | {row['N']} | {row['block']} | {row['held']} | "
            f"{s['decodes']} | {s['silent']} | {s['below_half']} | {s['no_estimate']} | "
            f"{s['above_warn']} | {_f(s['worst_ratio'])} | {_f(s['worst_silent_true'])} |"
        )
    lines += ["", "By code:", "", *_held_by_code(result)]
    return "\n".join(lines)


def _held_by_code(result: dict[str, Any]) -> list[str]:
    lines = [
        "| code | decodes | silent | cells with a silent decode | est < 0.5x true "
        "| no estimate | true > 0.1 | worst ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in [*result["by_code"].items(), ("all", result["total"])]:
        cells = sum(
            r["summary"]["silent"] > 0 for r in result["rows"] if name in ("all", r["code"])
        )
        lines.append(
            f"| {name} | {s['decodes']} | {s['silent']} | {cells} | {s['below_half']} | "
            f"{s['no_estimate']} | {s['above_warn']} | {_f(s['worst_ratio'])} |"
        )
    return lines


def before_after_held(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The ``--held`` grids of two runs: silent decodes per code, and every cell that had
    one before or after."""
    lines = [
        "| code | decodes | silent before | after | est < 0.5x before | after "
        "| no estimate before | after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in [*after["by_code"], "all"]:
        a = after["total"] if name == "all" else after["by_code"][name]
        b = before["total"] if name == "all" else before["by_code"].get(name, {})
        lines.append(
            f"| {name} | {a['decodes']} | {b.get('silent', '-')} | {a['silent']} | "
            f"{b.get('below_half', '-')} | {a['below_half']} | {b.get('no_estimate', '-')} | "
            f"{a['no_estimate']} |"
        )
    lines += [
        "",
        "Cells with a silent decode before or after:",
        "",
        "| code | K | N | block | held task | decodes | silent before | after "
        "| worst ratio before | after | no estimate before | after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    key = ("code", "K", "N", "block")
    old = {tuple(r[k] for k in key): r["summary"] for r in before["rows"]}
    for row in after["rows"]:
        a = row["summary"]
        b = old.get(tuple(row[k] for k in key), {})
        if not (a["silent"] or b.get("silent")):
            continue
        lines.append(
            f"| {row['code']} | {row['K']} | {row['N']} | {row['block']} | {row['held']} | "
            f"{a['decodes']} | {b.get('silent', '-')} | {a['silent']} | "
            f"{_f(b.get('worst_ratio'), 2)} | {_f(a['worst_ratio'], 2)} | "
            f"{b.get('no_estimate', '-')} | {a['no_estimate']} |"
        )
    return "\n".join(lines)


def use_estimator_from(rev: str) -> None:
    """Measure ``dask_bacc/codes/estimate.py`` as of git revision ``rev`` (the rest of the
    package as it is): the job's estimate path calls that module's ``estimate_error``."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    from dask_bacc.runtime import quality

    source = subprocess.run(
        ["git", "show", f"{rev}:dask_bacc/codes/estimate.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "estimate_at_rev.py"
    path.write_text(source)
    name = "dask_bacc.codes._estimate_at_rev"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    quality.estimate_error = module.estimate_error  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--draws", type=int, default=None, help="data draws per straggler set (4; --held: 16)"
    )
    p.add_argument("--random", type=int, default=40, help="random straggler sets per cell")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/small_k"))
    p.add_argument("--name", default="small_k", help="output file stem")
    p.add_argument("--estimate-rev", help="measure codes/estimate.py as of this git revision")
    p.add_argument(
        "--held",
        action="store_true",
        help="the held-task grid (systematic and local codes, K <= 4, N = K+1..2K, each "
        "block's own task held in turn) instead of the default one",
    )
    p.add_argument(
        "--before-after",
        nargs=2,
        type=Path,
        metavar=("BEFORE_JSON", "AFTER_JSON"),
        help="print the before/after table of two runs (docs/accuracy.md) and exit",
    )
    args = p.parse_args()
    if args.before_after:
        runs = [json.loads(path.read_text()) for path in args.before_after]
        held = [run.get("grid") == "held" for run in runs]
        if any(held) and not all(held):
            p.error("--before-after compares two runs of the same grid")
        print(before_after_held(*runs) if all(held) else before_after(*runs))
        return
    if args.draws is None:
        args.draws = 16 if args.held else 4
    if args.estimate_rev:
        use_estimator_from(args.estimate_rev)
    start = time.perf_counter()
    if args.held:
        result = {"config": vars(args) | {"out": str(args.out)}} | run_held(args)
        result["wall_seconds"] = time.perf_counter() - start
        text = markdown_held(result)
        print(text)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / f"{args.name}.md").write_text(
            "# Small K, each block's own task held in turn (issue 41)\n\n"
            f"`python benchmarks/small_k.py --held --draws {args.draws} --name {args.name}"
            + (f" --estimate-rev {args.estimate_rev}" if args.estimate_rev else "")
            + f"` ({result['wall_seconds']:.0f} s). *Silent*: true error above both 2x the "
            "estimate and bacc.warn-error (0.1) with no warning (a numeric estimate at most "
            "0.1); a missing estimate warns.\n\n" + text + "\n"
        )
        return
    rows, every = [], []
    by_set: dict[str, list[dict[str, Any]]] = {}
    n = 0
    for name in CODES:
        for K in KS:
            for r in REDUNDANCY:
                N = r * K
                for kind in KINDS:
                    set_rng = np.random.default_rng([args.seed, K, N, KINDS.index(kind)])
                    cases = []
                    for label, returned in straggler_sets(name, K, N, args.random, set_rng):
                        for _d in range(args.draws):
                            n += 1
                            case = run_case(name, K, N, kind, returned, seed=args.seed * 7919 + n)
                            case.update(set=label, returned=returned)
                            cases.append(case)
                            by_set.setdefault(f"{name}/{label}", []).append(case)
                    every += cases
                    rows.append(
                        {"code": name, "K": K, "N": N, "data": kind, "summary": summarize(cases)}
                    )
                    print(f"{name} K={K} N={N} {kind}: {rows[-1]['summary']}", flush=True)
    result = {
        "config": vars(args) | {"out": str(args.out)},
        "wall_seconds": time.perf_counter() - start,
        "rows": rows,
        "by_set": {k: summarize(v) for k, v in by_set.items()},
        "total": summarize(every),
    }
    text = markdown(result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(
        "# Small-K calibration of the error estimate\n\n"
        f"`python benchmarks/small_k.py --draws {args.draws} --random {args.random} "
        f"--name {args.name}"
        + (f" --estimate-rev {args.estimate_rev}" if args.estimate_rev else "")
        + f"` ({result['wall_seconds']:.0f} s)\n\n"
        + text
        + "\n"
    )


if __name__ == "__main__":
    main()
