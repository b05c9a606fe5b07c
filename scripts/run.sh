#!/usr/bin/env bash
# The main job on embedded defaults: install, then start aipaas with SQLite and a demo cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/aipaas up "$@"
