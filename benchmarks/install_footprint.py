"""What ``pip install dask-bacc`` brings, and what ``import dask_bacc`` costs, at two revisions.

For each revision: a ``git worktree``, a fresh venv, ``pip install <worktree>`` (the core,
no extras); then the number of installed distributions (``pip list``, pip itself
included), the size of ``site-packages`` in MB, whether matplotlib, bokeh,
prometheus_client or scikit-learn were installed, and the wall time of
``python -c "import dask_bacc"`` (a fresh interpreter each time), the two revisions
interleaved, median of ``--rounds``::

    python benchmarks/install_footprint.py --before 52d1e80 --after HEAD --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("matplotlib", "bokeh", "prometheus_client", "scikit-learn")


def install(rev: str, where: Path) -> Path:
    tree = where / f"tree-{rev}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    venv = where / f"venv-{rev}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(tree)], check=True, capture_output=True
    )
    return venv


def footprint(venv: Path) -> tuple[int, float, list[str]]:
    """Installed distributions, site-packages MB, and which extras' packages are there."""
    pkgs = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=freeze"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    names = {p.split("==")[0].lower().replace("-", "_") for p in pkgs}
    (site,) = (venv / "lib").glob("python3*/site-packages")
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 2**20
    extras = [e for e in EXTRAS if e.replace("-", "_") in names]
    return len(pkgs), size, extras


def import_seconds(venv: Path) -> float:
    t = time.perf_counter()
    # from the venv's folder: ``python -c`` puts the working directory first on sys.path,
    # and a checkout's dask_bacc there would shadow the installed one
    subprocess.run([str(venv / "bin" / "python"), "-c", "import dask_bacc"], check=True, cwd=venv)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", default="HEAD")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="footprint-"))
    revs = {"before": args.before, "after": args.after}
    venvs: dict[str, Path] = {}
    try:
        for label, rev in revs.items():
            venvs[label] = install(rev, tmp)
        times: dict[str, list[float]] = {label: [] for label in revs}
        for r in range(args.rounds):
            for label in list(revs) if r % 2 == 0 else list(revs)[::-1]:
                times[label].append(import_seconds(venvs[label]))
        print(f"pip install (core) in a fresh venv; import time: median of {args.rounds} runs")
        print("| revision | packages | site-packages MB | extras' packages | import dask_bacc s |")
        print("|---|---:|---:|---|---:|")
        for label, rev in revs.items():
            packages, mb, extras = footprint(venvs[label])
            print(
                f"| {label} ({rev}) | {packages} | {mb:.0f} | {', '.join(extras) or 'none'} | "
                f"{statistics.median(times[label]):.2f} |"
            )
        ratio = statistics.median(times["after"]) / statistics.median(times["before"])
        print(f"\nimport time after/before: {ratio:.2f}")
    finally:
        for rev in revs.values():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / f"tree-{rev}")],
                capture_output=True,
            )


if __name__ == "__main__":
    main()
