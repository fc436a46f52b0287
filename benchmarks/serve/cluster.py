"""Serving parties as real processes, for `vfl bench serve` and tests/test_serving_grpc.py.

`train_bundles` trains a LASER-VFL federation in process on the parties' tables and writes each
party's serving bundle; `ServingCluster` starts one `vfl-client --serve-bundle` process per party
(the label party last, as the gateway with a `--peer` per other party, optionally through a
shaping link per peer, benchmarks/netshape.py), reads their ports from their logs, and kills
every process it started (by its own process group) when it ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import federation_sources, load_table_federation
from vfl_core.serving.bundle import write_bundle
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SECRET = "vfl-serving-secret"
START_TIMEOUT_S = 90.0
_GRPC_PORT = re.compile(r"listening on \S+ \(port (\d+)\)")
_HTTP_PORT = re.compile(r"over HTTPS? on \S+ \(port (\d+)\)")
_READY = re.compile(r"serves block (\d+) as")  # logged once loaded and warmed up


def train_bundles(
    tables: Sequence[Path],
    out: Path,
    *,
    id_column: str,
    label_column: str,
    task: str = "classification",
    config: TrainConfig | None = None,
) -> tuple[list[Path], Federation, dict[int, Party]]:
    """Train on `tables` (block k: the k-th; labels where the column is) in process, write
    out/party<k> bundles; returns them, the federation and its parties."""
    sources = federation_sources(
        list(tables),
        None,
        id_column=id_column,
        label_column=label_column,
        label_blocks=None,
        task=task,  # type: ignore[arg-type]
    )
    config = config or TrainConfig(epochs=2)
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, config, secret=SECRET.encode())
        for d in load_table_federation(sources)
    }
    fed = Federation(InProcessTransport(parties), config, progress=False)
    fed.align()
    fed.train()
    choice = fed.serving_choice()  # the threshold and subsets chosen on validation
    dirs = [write_bundle(p, out / p.party_id, choice=choice) for _, p in sorted(parties.items())]
    return dirs, fed, parties


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    port: int = 0
    http_port: int = 0


@dataclass
class ServingCluster:
    """Start with `start(...)`; use as a context manager so every process dies at the end."""

    workdir: Path
    security: Sequence[str] = ("--insecure",)
    device: str = "cpu"  # every serving party's --device (cpu | cuda[:N])
    procs: dict[str, Proc] = field(default_factory=dict)

    def __enter__(self) -> ServingCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_party(
        self,
        name: str,
        bundle: Path,
        table: Path | None,
        id_column: str,
        listen: str = "127.0.0.1:0",
        lookup: str | None = None,
    ) -> Proc:
        """A feature party serving `table`, or with `lookup` (module:function) its rows from
        that function instead."""
        args = self._args(name, bundle, table, id_column, listen)
        if lookup is not None:
            args += ["--lookup", lookup]
        return self._spawn(name, args)

    def start_gateway(
        self,
        name: str,
        bundle: Path,
        table: Path,
        id_column: str,
        peers: Sequence[str],
        extra: Sequence[str] = (),
        wait_ready: bool = True,
    ) -> Proc:
        """The gateway; returned once ready (warmed up), or with `wait_ready` False as soon
        as its HTTP port is open."""
        args = self._args(name, bundle, table, id_column)
        args += [a for p in peers for a in ("--peer", p)] + ["--http", "127.0.0.1:0", *extra]
        return self._spawn(name, args, http=True, wait_ready=wait_ready)

    def _args(
        self,
        name: str,
        bundle: Path,
        table: Path | None,
        id_column: str,
        listen: str = "127.0.0.1:0",
    ) -> list[str]:
        data = [] if table is None else ["--data", str(table), "--id-column", id_column]
        return [
            sys.executable, "-m", "vfl_cli.client_cmd", "--serve-bundle", str(bundle), *data,
            "--party-id", name, "--listen", listen, "--secret", SECRET,
            "--device", self.device, *self.security,
        ]  # fmt: skip

    def _spawn(
        self, name: str, argv: list[str], http: bool = False, wait_ready: bool = True
    ) -> Proc:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        proc = self.procs[name] = Proc(name, popen, log)
        proc.port = self._wait_for(proc, _GRPC_PORT)
        if http:
            proc.http_port = self._wait_for(proc, _HTTP_PORT)
        if wait_ready:
            self._wait_for(proc, _READY)
        return proc

    def _wait_for(self, proc: Proc, pattern: re.Pattern[str]) -> int:
        end = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < end:
            found = pattern.search(proc.log.read_text(errors="replace"))
            if found:
                return int(found.group(1))
            if proc.popen.poll() is not None:
                break
            time.sleep(0.1)
        tail = proc.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{proc.name} did not start serving:\n{tail}")

    def signal(self, name: str, sig: signal.Signals) -> None:
        """Send `sig` to the process group of `name` (SIGKILL, SIGSTOP, SIGCONT)."""
        os.killpg(self.procs[name].popen.pid, sig)

    def close(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGCONT)
                os.killpg(proc.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=10)
        self.procs.clear()
