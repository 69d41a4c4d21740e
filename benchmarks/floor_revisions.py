"""Per-job overhead against a bare futures loop, two revisions of dask-bacc in one run.

Rounds alternate the revisions (order flipped every round): each round runs
``benchmarks/floor.py --part job`` (this checkout's script) with ``PYTHONPATH`` on one
revision's ``git worktree``, so the bare loop and ``map_coded`` are interleaved inside
each process and the revisions are interleaved across processes. Reported per N: the
median over rounds of each round's ``map_coded / bare loop`` (explicit wait) and
``default wait / bare loop``. ``map_coded`` uses each revision's default code.

    python benchmarks/floor_revisions.py --before a848ae7 [--after HEAD] [--rounds 5]
        [--processes] [--rows 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worktree(rev: str, where: Path) -> Path:
    path = where / rev.replace("/", "_")
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
        check=True,
        capture_output=True,
    )
    return path


def collect(ratios: dict[str, dict[str, list[float]]], label: str, run: dict) -> None:
    """Add one floor.py run's ratios (per N and variant) under ``label``."""
    for n, res in run["job"]["per_N"].items():
        for v in ("map_coded", "map_coded default wait"):
            ratios.setdefault(n, {}).setdefault(f"{label}|{v}", []).append(res["ratio_to_bare"][v])


def table(ratios: dict[str, dict[str, list[float]]]) -> str:
    lines = [
        "| N | before | after | after / before | before, default wait | after, default wait |",
        "|--:|--:|--:|--:|--:|--:|",
    ]
    for n in sorted(ratios, key=int):
        m = {k: statistics.median(v) for k, v in ratios[n].items()}
        b, a = m["before|map_coded"], m["after|map_coded"]
        lines.append(
            f"| {n} | {b:.2f} | {a:.2f} | {a / b:.2f} | {m['before|map_coded default wait']:.2f}"
            f" | {m['after|map_coded default wait']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", default="HEAD")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3, help="floor.py repetitions per round")
    p.add_argument("--N", default="8,16,32,64")
    p.add_argument("--keep", type=Path, default=None, help="copy each round's JSON here")
    p.add_argument("--processes", action="store_true", help="worker processes (floor.py's)")
    p.add_argument("--rows", type=int, default=None, help="rows of each block (floor.py's)")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="floor-revs-"))
    trees = {"before": worktree(args.before, tmp), "after": worktree(args.after, tmp)}
    ratios: dict[str, dict[str, list[float]]] = {}
    try:
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for label in order:
                out = tmp / f"{label}-{r}.json"
                env = {**os.environ, "PYTHONPATH": str(trees[label])}
                cmd = [
                    sys.executable,
                    str(ROOT / "benchmarks" / "floor.py"),
                    "--part",
                    "job",
                    "--N",
                    args.N,
                    "--reps",
                    str(args.reps),
                    "--json",
                    str(out),
                ]
                cmd += ["--processes"] if args.processes else []
                cmd += ["--rows", str(args.rows)] if args.rows else []
                subprocess.run(cmd, env=env, check=True, capture_output=True)
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    (args.keep / out.name).write_text(out.read_text())
                collect(ratios, label, json.loads(out.read_text()))
                print(f"round {r + 1}/{args.rounds} {label} done", file=sys.stderr, flush=True)
    finally:
        for path in trees.values():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                capture_output=True,
            )
    print(
        f"map_coded / bare futures loop, median over {args.rounds} interleaved rounds "
        f"({args.reps} repetitions each); before = {args.before}, after = {args.after}\n"
    )
    print(table(ratios))


if __name__ == "__main__":
    main()
