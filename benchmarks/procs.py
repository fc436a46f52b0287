"""A real federation of processes on 127.0.0.1 for benchmarks: one vfl-coordinator, K vfl-clients.

Every process runs in its own session (process group) and is killed with its group when the
context ends, whatever happened; its output goes to a log file in the run directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from benchmarks.setups import PAPER_PLAIN, paper_plain

BIN = Path(sys.executable).parent
# The console scripts' modules, for an interpreter without them installed (a checkout run from
# PYTHONPATH, as scripts/gpu-check.sh does on a device machine).
_MODULES = {"vfl-coordinator": "vfl_cli.coordinator_cmd", "vfl-client": "vfl_cli.client_cmd"}


def command(script: str) -> list[str]:
    """argv that starts one of our console scripts with this interpreter's environment."""
    path = BIN / script
    return [str(path)] if path.exists() else [sys.executable, "-m", _MODULES[script]]


SECRET = "vfl-bench-secret"
# Plaintext on loopback, and the keyed-hash alignment the in-process simulation uses (so both
# transports train on the same batches); TLS and PSI costs are not part of these numbers.
SECURITY = ("--insecure", "--alignment", "hmac")


class FederationError(RuntimeError):
    pass


@contextlib.contextmanager
def federation(
    party_dirs: Sequence[Path],
    workdir: Path,
    coordinator_args: Sequence[str],
    network: Callable[[int, int], list[str]] | None = None,
    pids: list[int] | None = None,
) -> Iterator[Path]:
    """Start the processes; yields the coordinator's --out directory. Kills all on exit.

    `network(k, coordinator_port)` gives client k's --coordinator, --listen (and --advertise)
    options, e.g. through a shaping proxy (benchmarks/netshape.py); default: direct on loopback.
    `pids`, if given, receives the processes' ids (coordinator first) as they start.
    """
    network = network or _loopback
    workdir.mkdir(parents=True, exist_ok=True)
    out, port_file = workdir / "coordinator-out", workdir / "coordinator.port"
    procs: list[subprocess.Popen] = []
    try:
        argv = [*command("vfl-coordinator"), "--clients", str(len(party_dirs))]
        argv += ["--listen", "127.0.0.1:0", "--port-file", str(port_file), "--out", str(out)]
        argv += ["--no-progress", "--log-level", "warning", "--insecure", "--alignment", "hmac"]
        argv += list(coordinator_args)
        procs.append(_spawn(argv, workdir / "coordinator.log", pids))
        port = _wait_port(port_file, procs[0], workdir)
        for k, data in enumerate(party_dirs):
            argv = [*command("vfl-client"), "--data", str(data)]
            argv += network(k, port)
            argv += ["--secret", SECRET, "--threads", "1", "--log-level", "warning", "--insecure"]
            argv += ["--alignment", "hmac"]
            procs.append(_spawn(argv, workdir / f"client{k}.log", pids))
        yield out
        _wait_exit(procs, workdir)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _loopback(_k: int, port: int) -> list[str]:
    return ["--coordinator", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0"]


def _spawn(argv: list[str], log: Path, pids: list[int] | None = None) -> subprocess.Popen:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    if pids is not None:
        pids.append(proc.pid)
    return proc


def _wait_port(port_file: Path, coordinator: subprocess.Popen, workdir: Path) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int(port_file.read_text())
        if coordinator.poll() is not None:
            raise FederationError(f"coordinator exited:\n{_tail(workdir / 'coordinator.log')}")
        time.sleep(0.1)
    raise FederationError("coordinator did not listen within 120 s")


def _wait_exit(procs: list[subprocess.Popen], workdir: Path, timeout: float = 1800) -> None:
    """The coordinator ends the run (and tells the clients to stop)."""
    try:
        code = procs[0].wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FederationError(f"run did not finish in {timeout:.0f} s; see {workdir}") from None
    if code != 0:
        raise FederationError(
            f"coordinator exited with {code}:\n{_tail(workdir / 'coordinator.log')}"
        )
    for proc in procs[1:]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {log})"


def cpu_seconds(pids: Sequence[int], children: bool = False) -> float:
    """User + system CPU seconds the processes have used so far (Linux /proc; 0 once gone),
    with `children` also that of their children they have waited for (e.g. worker pools)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        if children:
            total += int(fields[13]) + int(fields[14])  # cutime, cstime (16 and 17)
    return total / tick


M = TypeVar("M")


class EpochWatch(Generic[M]):
    """Follows <out>/epochs.jsonl from a thread: `mark()` as each epoch is logged (values kept in
    `marks`), and `on_last()` once `epochs` are (without `epochs`, until `stop()`)."""

    POLL_S = 0.02

    def __init__(
        self,
        mark: Callable[[], M],
        epochs: int = sys.maxsize,
        on_last: Callable[[], None] | None = None,
    ) -> None:
        self.mark, self.epochs, self.on_last = mark, epochs, on_last
        self.marks: list[M] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, out: Path) -> None:
        self._thread = threading.Thread(target=self._follow, args=(out,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _follow(self, out: Path) -> None:
        path = out / "epochs.jsonl"
        while not self._stop.wait(self.POLL_S) and len(self.marks) < self.epochs:
            try:
                lines = path.read_text().count("\n")
            except FileNotFoundError:
                continue
            while len(self.marks) < lines:
                self.marks.append(self.mark())
        if len(self.marks) >= self.epochs and self.on_last is not None:
            self.on_last()

    def per_round(self: EpochWatch[float], rounds: Sequence[int], first: int = 0) -> float | None:
        """(mark at the last epoch - mark at epoch `first`) / the rounds in between."""
        if len(self.marks) <= first + 1:
            return None
        last = len(self.marks) - 1
        return (self.marks[last] - self.marks[first]) / sum(rounds[first + 1 : last + 1])


def train_args(train: dict[str, Any]) -> list[str]:
    """vfl-coordinator options for a TrainConfig mapping (model fields under "model"); the
    paper's plain run unless the mapping says otherwise (setups.PAPER_PLAIN)."""
    train = paper_plain(train)
    model = train["model"]
    args = ["--method", train.get("method", "laser"), "--seed", str(train["seed"])]
    args += ["--epochs", str(train["epochs"]), "--batch-size", str(train["batch_size"])]
    args += ["--lr", str(train["lr"]), "--representation", model["representation"]]
    args += ["--hidden", ",".join(map(str, model["hidden"]))]
    args += ["--embed-dim", str(model["embed_dim"])]
    args += ["--head", model["head"], "--linear-lane", str(model.get("linear_lane", 0))]
    keys = dict.fromkeys(("weight_decay", "balance", "wire_dtype", "staleness", *PAPER_PLAIN))
    for key in keys:
        if key in train:
            args += ["--" + key.replace("_", "-"), str(train[key])]
    return args


def results(out: Path) -> dict[str, Any]:
    return json.loads((out / "results.json").read_text())
