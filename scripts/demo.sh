#!/usr/bin/env bash
# Set up a virtual environment and run the main job: a real federation of one coordinator and
# four vfl-client processes on localhost (digits data), training, inference, a SIGKILLed client,
# inference again. Extra arguments go to `vfl demo` (see `vfl demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
# the `report` extra (matplotlib): the demo ends by writing runs/demo/run/report/report.html
VFL_EXTRAS="${VFL_EXTRAS:-[report]}" source scripts/venv.sh
exec .venv/bin/vfl demo "$@"
