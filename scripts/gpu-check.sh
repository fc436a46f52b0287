#!/usr/bin/env bash
# The project's GPU check, for a session lent an NVIDIA machine (DEVELOPERS.md, "GPU"): a real
# federation of 4 clients with --device cpu and --device cuda (seconds per epoch, serving latency
# of `vfl evaluate`), then `vfl bench scale throughput` (in process vs gRPC) on the machine's cores.
# Writes benchmarks/results/gpu.md; sized to about 5-8 minutes on a 16-core H100 machine.
#   bash scripts/gpu-check.sh                       # both devices, 5 epochs, 20 evaluate calls
#   bash scripts/gpu-check.sh --devices cpu --no-throughput --epochs 1 --calls 2   # a dry run
# It runs the checkout from PYTHONPATH with $VFL_PYTHON, .venv/bin/python or python3 (a
# device machine has no network for a venv: carry wheels of what its Python lacks, see the
# device tool's README).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VFL_PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_check.py "$@"
