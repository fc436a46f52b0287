#!/usr/bin/env bash
# Set up and run every check: lint, format, generated-stub drift, compose file, docs site, tests.
# Extra arguments go to one pytest run (e.g. `-m "not slow"` for the fast unit tests only).
# Without them every test that does not time faults runs on two workers (pytest-xdist; a test
# file stays on one worker, so a module's shared federation starts once; faults that land at a
# round count or an event and wait for events run there too), then the `alone` tests, which bound
# replies in seconds, hold or land faults by the clock, or attack with both cores, one at a time
# on an otherwise idle machine.
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
# the manual (docs/, mkdocs.yml): broken links, missing anchors, pages left out of the nav fail
echo "== mkdocs build --strict"
site_dir=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site_dir" && echo ok
rm -rf "$site_dir"
if [ "$#" -gt 0 ]; then
  echo "== pytest";          exec .venv/bin/python -m pytest "$@"
fi
rc=0  # both runs always run; the script fails if either did
echo "== pytest: all but the timed fault tests, two workers"
# files in collection order (tests/conftest.py puts the federation files first), not by count
.venv/bin/python -m pytest -m "not alone" -n 2 --dist loadfile --no-loadscope-reorder --durations=15 || rc=$?
echo "== pytest: timed fault tests on real federations, one at a time"
# only the files that hold such tests: collecting all of them would import every test module
# (seconds of the one-at-a-time phase; any use of the marker names `mark.alone`)
mapfile -t alone_files < <(grep -l "mark\.alone" tests/test_*.py)
.venv/bin/python -m pytest -m alone --durations=5 "${alone_files[@]}" || rc=$?
exit "$rc"
