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
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
SECRET = "vfl-bench-secret"
# Plaintext on loopback, and the keyed-hash alignment the in-process simulation uses (so both
# transports train on the same batches); TLS and PSI costs are not part of these numbers.
SECURITY = ("--insecure", "--alignment", "hmac")


class FederationError(RuntimeError):
    pass


@contextlib.contextmanager
def federation(
    party_dirs: Sequence[Path], workdir: Path, coordinator_args: Sequence[str]
) -> Iterator[Path]:
    """Start the processes; yields the coordinator's --out directory. Kills all on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    out, port_file = workdir / "coordinator-out", workdir / "coordinator.port"
    procs: list[subprocess.Popen] = []
    try:
        argv = [str(BIN / "vfl-coordinator"), "--clients", str(len(party_dirs))]
        argv += ["--listen", "127.0.0.1:0", "--port-file", str(port_file), "--out", str(out)]
        argv += ["--no-progress", "--log-level", "warning", "--insecure", "--alignment", "hmac"]
        argv += list(coordinator_args)
        procs.append(_spawn(argv, workdir / "coordinator.log"))
        port = _wait_port(port_file, procs[0], workdir)
        for k, data in enumerate(party_dirs):
            argv = [str(BIN / "vfl-client"), "--data", str(data)]
            argv += ["--coordinator", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0"]
            argv += ["--secret", SECRET, "--threads", "1", "--log-level", "warning", "--insecure"]
            argv += ["--alignment", "hmac"]
            procs.append(_spawn(argv, workdir / f"client{k}.log"))
        yield out
        _wait_exit(procs, workdir)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


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


def results(out: Path) -> dict[str, Any]:
    return json.loads((out / "results.json").read_text())
