#!/usr/bin/env bash
# Type-check the package with mypy: the files and the strictness are in pyproject.toml's
# [tool.mypy]. Run from anywhere, with the project's .venv present (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ! -x .venv/bin/python ]]; then
    echo "ci/typecheck.sh: .venv/bin/python not found; create the venv first (.ci/run)" >&2
    exit 2
fi
.venv/bin/pip install -q -r ci/requirements-typecheck.txt
.venv/bin/mypy
