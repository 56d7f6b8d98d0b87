#!/usr/bin/env bash
# Static checks of the Python code: ruff with pyflakes' rules (pyproject.toml [tool.ruff]: unused
# imports and variables, undefined names, redefinitions) on every Python file of the repository.
# Exit status 0 = clean. Needs ruff 0.17.6 (pip install ruff==0.17.6; pyproject.toml refuses
# another version).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v ruff >/dev/null; then
    echo "lint_py: ruff not found (pip install ruff==0.17.6)" >&2
    exit 2
fi
ruff check --no-cache mmaemu mmaemu_tools test scripts benchmarks examples setup.py
echo "lint_py: ruff (pyflakes rules) clean"
