#!/usr/bin/env bash
# Creates (or refreshes) the project's Python virtual environment in .venv and installs the
# `surge` Python package into it in editable mode, with every extra: `make test` and `make demo`
# both run in it. Idempotent: a second run only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.surge-installed
if [ ! -f "$stamp" ] || [ python/pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -e 'python[all,test]'
    touch "$stamp"
fi
