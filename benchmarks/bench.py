"""The dask-bacc benchmark harness as a script: the same as ``dask bacc bench``.

Run it with::

    python benchmarks/bench.py                          # the reference bench, a few minutes
    python benchmarks/bench.py --K 8,16 --N 32 --jobs 30 --out bench-results
    python benchmarks/bench.py --func square            # adds Lagrange (f is a polynomial)
    python benchmarks/bench.py --straggler kills        # a worker dies during every job
    python benchmarks/bench.py --help

Everything (configuration, the interleaved run loop, metrics, markdown/JSON/PNG output)
lives in :mod:`dask_bacc.bench`; this file only calls its click command.
"""

from __future__ import annotations

from dask_bacc.bench.cli import bench

if __name__ == "__main__":
    bench(prog_name="python benchmarks/bench.py")
