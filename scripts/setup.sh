#!/usr/bin/env bash
# Create .venv (once) and install aipaas with its development tools into it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.aipaas-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev,ray]'
  touch "$stamp"
fi
