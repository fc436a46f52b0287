# Sourced by the scripts: create .venv and install the project into it (idempotent).
# torch is pinned to a CPU build: a bare `torch` from PyPI is a multi-GB CUDA download on Linux.
# Elsewhere, PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu fetches the CPU build.
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${VFL_EXTRAS:-}"
