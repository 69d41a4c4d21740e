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

Usage::

    python benchmarks/small_k.py [--draws 4] [--random 40] [--out benchmarks/results/small_k]
    python benchmarks/small_k.py --estimate-rev 0874b27 --name before  # the estimator then
    python benchmarks/small_k.py --before-after benchmarks/results/small_k/{before,after}.json
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
    p.add_argument("--draws", type=int, default=4, help="data draws per straggler set")
    p.add_argument("--random", type=int, default=40, help="random straggler sets per cell")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/small_k"))
    p.add_argument("--name", default="small_k", help="output file stem")
    p.add_argument("--estimate-rev", help="measure codes/estimate.py as of this git revision")
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
        print(before_after(*runs))
        return
    if args.estimate_rev:
        use_estimator_from(args.estimate_rev)
    start = time.perf_counter()
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
