#!/usr/bin/env bash
# Lint and the whole test suite: the README's test command, word for word (run from the
# repository root).
set -euo pipefail

python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]" && .venv/bin/ruff check . && .venv/bin/python -m pytest -q
