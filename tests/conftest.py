"""Shared test settings and the fixtures several test modules use (none of them autouse: a
module asks for what it needs)."""

import compileall
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from harness import Cluster, prepare_digits

# One intra-op thread: the machine has two cores shared with the federation processes the slow
# tests start, and a fixed thread count keeps float reductions identical across runs.
torch.set_num_threads(1)

# The packages the real processes of the slow tests import (vfl-client, vfl-coordinator, vfl).
PACKAGES = ("vfl_cli", "vfl_client", "vfl_coordinator", "vfl_core", "vfl_wire")


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the project's packages once, before any test starts a process. Where
    PYTHONDONTWRITEBYTECODE is set (as on the machine CI runs on) nothing caches bytecode, so
    each of the hundreds of processes the tests start would compile ~100 modules from source
    again (~0.1 s of CPU each). Compiled in the xdist controller only (workers see its files);
    unchanged sources are skipped, and an edited one is compiled again."""
    if hasattr(config, "workerinput"):
        return
    for name in PACKAGES:
        package = __import__(name)
        compileall.compile_dir(Path(package.__file__).parent, quiet=2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that start real federations (any test marked `slow`) first, each file's tests
    in their order, then the in-process files. scripts/test.sh hands whole files to two workers
    in this order (`--no-loadscope-reorder`; xdist's default puts the files with the most tests
    first, which leaves the one-test federation files for last, where one worker can still run
    a minute of them while the other has nothing left): the hundreds of short in-process files
    fill the end, so the two workers end close together."""
    heavy = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in heavy)  # stable: files stay whole and in order


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module's tests, whatever an earlier module left behind."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def restore_process_state() -> Iterator[None]:
    """The CLI commands configure the root logger (on the runner's stream) and set torch's thread
    count process-wide; undo both after a test that runs them in this process."""
    root = logging.getLogger()
    handlers, level, threads = list(root.handlers), root.level, torch.get_num_threads()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def party_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Digits in K=4 party directories (p_miss 0.1, seed 0); a module may define its own."""
    return prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A harness cluster for one test; closing it kills and checks every process it started."""
    with Cluster(tmp_path / "cluster") as c:
        yield c
