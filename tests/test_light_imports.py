"""The coordinator and the `vfl` CLI start without torch: they schedule, relay and talk gRPC, and
importing torch is most of a process's start-up CPU (benchmarks/results/test_time.md). torch is
imported by the functions that need it (a checkpoint file, a privacy accountant), not on the
import path of vfl_coordinator.runner or vfl_cli.app."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["vfl_coordinator.runner", "vfl_cli.coordinator_cmd", "vfl_cli.app"]
)
def test_given_a_fresh_interpreter_when_module_imported_then_torch_is_not_loaded(
    module: str,
) -> None:
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m == 'torch'))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"{module} imports torch"
