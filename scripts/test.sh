#!/usr/bin/env bash
# Set up and run every check: lint, format, generated-stub drift, compose file, tests.
# Extra arguments go to pytest (e.g. `-m "not slow"` for the fast unit tests only).
set -euo pipefail
cd "$(dirname "$0")/.."
VFL_EXTRAS="[dev]" source scripts/venv.sh
echo "== ruff check";        .venv/bin/ruff check .
echo "== ruff format";       .venv/bin/ruff format --check .
echo "== generated stubs";   .venv/bin/python -m vfl_wire.codegen --check
if command -v docker-compose >/dev/null 2>&1; then
  echo "== docker-compose config"; docker-compose -f docker-compose.yml config -q && echo ok
else
  echo "== docker-compose config: skipped (docker-compose not installed; .ci/run installs it)"
fi
echo "== pytest";            exec .venv/bin/python -m pytest "$@"
