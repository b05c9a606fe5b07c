#!/usr/bin/env bash
# mypy over tests/, once: tests/ and each of its directories is a package, so every module,
# conftest.py included, has its own dotted name (tests.unit.server.conftest). Settings:
# pyproject.toml's [tool.mypy].
set -euo pipefail
cd "$(dirname "$0")/.."
MYPY="${MYPY:-mypy}"
"$MYPY" tests
