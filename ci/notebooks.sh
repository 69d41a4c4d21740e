#!/usr/bin/env bash
# Execute the example notebooks (examples/*.ipynb) headless in their smoke mode
# (DASK_BACC_SMOKE=1: small sizes, few steps) and fail on any cell error.
#
# Run from anywhere, with the project's .venv present (see .ci/run):
#     ci/notebooks.sh                                    # every examples/*.ipynb
#     ci/notebooks.sh examples/getting_started.ipynb     # some of them
# The notebooks are executed from copies in a temporary directory (also their working
# directory); the tracked .ipynb files are never written to. KEEP_NOTEBOOKS=1 keeps the
# executed copies and prints where they are.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ! -x .venv/bin/python ]]; then
    echo "ci/notebooks.sh: .venv/bin/python not found; create the venv first (.ci/run)" >&2
    exit 2
fi
.venv/bin/pip install -q -r ci/requirements-notebooks.txt

workdir="$(mktemp -d "${TMPDIR:-/tmp}/dask-bacc-notebooks.XXXXXX")"
if [[ "${KEEP_NOTEBOOKS:-}" == "1" ]]; then
    trap 'echo "executed notebooks kept in $workdir"' EXIT
else
    trap 'rm -rf "$workdir"' EXIT
fi
if [[ $# -gt 0 ]]; then
    cp "$@" "$workdir/"
else
    cp examples/*.ipynb "$workdir/"
fi

DASK_BACC_SMOKE=1 .venv/bin/python - "$workdir" <<'EOF'
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

workdir = Path(sys.argv[1])
failed = []
total = time.perf_counter()
for path in sorted(workdir.glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=300,  # seconds per cell
        allow_errors=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    start = time.perf_counter()
    try:
        client.execute()
    except Exception as exc:  # a cell's error, a timeout or a dead kernel
        failed.append(path.name)
        print(f"FAIL {path.name} after {time.perf_counter() - start:.1f} s\n{exc}", flush=True)
    else:
        # what a static render (nbconvert, GitHub) shows of a progress widget is its saved
        # text fallback: it must be the bar's final state, not "0%| 0/3" (issue 28)
        stuck = [
            "".join(out["data"]["text/plain"])
            for cell in nb.cells
            for out in cell.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in out.get("data", {})
            and re.search(r"(?<![0-9])0%\|", "".join(out["data"].get("text/plain", "")))
        ]
        if stuck:
            failed.append(path.name)
            print(f"FAIL {path.name}: progress bars saved at 0%: {stuck}", flush=True)
        else:
            print(f"ok   {path.name}: {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        nbformat.write(nb, path)  # the copy in workdir, never examples/
count = len(list(workdir.glob("*.ipynb")))
print(f"{len(failed)} of {count} notebooks failed, {time.perf_counter() - total:.1f} s in all")
sys.exit(1 if failed else 0)
EOF
