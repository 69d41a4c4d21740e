"""dask-bacc against plain Dask when 10% of the tasks straggle: ``dask bacc demo`` as a script.

Run it with::

    python examples/straggler_demo.py                 # the same as `dask bacc demo`
    python examples/straggler_demo.py --rounds 10 --straggler-delay 1
    python examples/straggler_demo.py --help

The demo itself lives in :mod:`dask_bacc.bench.demo` (see its docstring for how the plain
baseline meets the same stragglers); this file runs the same click command with the same
options.
"""

from __future__ import annotations

from dask_bacc.bench.demo import demo

if __name__ == "__main__":
    demo.main(prog_name="straggler_demo.py")
