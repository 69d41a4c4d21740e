#!/usr/bin/env bash
# Build the documentation site (docs/_build/html) with warnings as errors and every
# reference checked (-n). Run from the repository root, with .venv existing.
set -euo pipefail

.venv/bin/pip install -q -e ".[docs]"
.venv/bin/python -m sphinx -W -n --keep-going -b html docs docs/_build/html
