"""The coordinator and the `vfl` CLI start without torch: they schedule, relay and talk gRPC, and
importing torch is most of a process's start-up CPU (benchmarks/results/test_time.md). torch is
imported by the functions that need it (a checkpoint file, a privacy accountant), not on the
import path of vfl_coordinator.runner or vfl_cli.app."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from harness import Cluster, prepare_digits

RUN_TIMEOUT_S = 300.0
# a line of `python -X importtime` that imports the torch package itself (at any time of the run)
_TORCH_IMPORT = re.compile(r"^import time:.*\|\s*torch$", re.M)


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


def test_given_a_checkpoint_dir_when_the_checkpointer_starts_then_torch_loads_on_a_thread(
    tmp_path: Path,
) -> None:
    """A coordinator that writes checkpoints needs torch for them: it is imported on a thread as
    the run starts (it overlaps the alignment), so that the first checkpoint, which every party
    waits for, does not pay for the import."""
    code = (
        "import sys, threading\n"
        "from vfl_coordinator.checkpoints import Checkpointer\n"
        "from vfl_coordinator.config import CoordinatorConfig\n"
        f"config = CoordinatorConfig(clients=2, checkpoint_dir={str(tmp_path)!r})\n"
        "before = 'torch' in sys.modules\n"
        "warm = Checkpointer(config, None, None).warm  # (its state: not read here)\n"
        "assert warm.daemon and warm is not threading.main_thread()\n"
        "warm.join(120)\n"
        "print(before, 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.slow
def test_given_a_short_relay_run_when_the_coordinator_finishes_then_it_never_imported_torch(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The whole run: registration, alignment, the rounds relayed, each epoch's run log (its
    TensorBoard events too) and the test evaluation; `-X importtime` logs every import the
    coordinator makes, the lazy ones included. Two parties: the coordinator's code path is the
    same for any number, and two are two client processes fewer than four."""
    two = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)
    coord, clients = cluster.federation(two, epochs=1, wrap=[sys.executable, "-X", "importtime"])
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(60) == 0, cluster.describe()
    assert coord.results() is not None, cluster.describe()
    assert (coord.out / "tensorboard").is_dir()  # the run log's events were written
    log = coord.log()
    assert "import time:" in log and "vfl_coordinator.runner" in log
    assert not _TORCH_IMPORT.search(log), "the coordinator imported torch"
