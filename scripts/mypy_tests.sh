#!/usr/bin/env bash
# mypy over tests/ (pyproject.toml's [tool.mypy] names every test directory a package base, as
# pytest puts each on sys.path). conftest.py repeats across directories and one mypy run cannot
# tell two modules of one name apart: `mypy tests` leaves them out, and each is checked alone.
set -euo pipefail
cd "$(dirname "$0")/.."
MYPY="${MYPY:-mypy}"
"$MYPY" tests
find tests -name conftest.py -print0 | sort -z | while IFS= read -r -d '' conftest; do
  "$MYPY" --no-error-summary "$conftest"
done
