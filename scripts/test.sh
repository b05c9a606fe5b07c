#!/usr/bin/env bash
# Every test: install, lint, type-check, check import boundaries, then run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
ruff check src tests benchmarks
mypy
lint-imports
pytest -n 2 "$@"
