"""`vfl demo`: the main job. A real federation of separate processes on localhost.

It prepares four party directories from the embedded digits data, starts one coordinator and
four clients (each its own process, talking gRPC over TCP), trains LASER-VFL (or a baseline of
`--method`), evaluates with every party, kills one client with SIGKILL, and evaluates again with
the survivors.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vfl_cli import defaults
from vfl_cli.errors import user_errors
from vfl_cli.train_options import Deadline
from vfl_core.errors import VflError

if TYPE_CHECKING:  # grpc and torch: imported when the demo runs, not for --help
    from vfl_cli.coordinator_client import CoordinatorClient

Opt = typer.Option


class DemoError(VflError):
    """A process of the demo federation failed; the message points at its log."""


@user_errors
def demo(
    workdir: Annotated[Path, Opt(help="where data, logs and results go")] = Path("runs/demo"),
    clients: Annotated[int, Opt(help="number of parties")] = 4,
    epochs: Annotated[int, Opt(help="passes over the training samples")] = 60,
    p_miss: Annotated[float, Opt(help="train and test probability a party misses a sample")] = 0.1,
    kill_block: Annotated[int, Opt(help="the client to SIGKILL before the second inference")] = 2,
    seed: Annotated[int, Opt(help="seeds data, model and faults")] = 0,
    deadline: Deadline = 5.0,
    fault_rate: Annotated[
        float, Opt(help="R_d: per tick, each running client is killed or frozen (0: no faults)")
    ] = 0.0,
    rejoin_rate: Annotated[
        float, Opt(help="R_u: per tick, each failed client is restarted or thawed")
    ] = 0.5,
    fault_kind: Annotated[str, Opt(help="kill (SIGKILL, restart) or freeze (SIGSTOP, SIGCONT)")] = (
        "kill"
    ),
    fault_every: Annotated[float, Opt(help="seconds per fault tick")] = 2.0,
    method: Annotated[str, Opt(help=" | ".join(defaults.METHODS))] = "laser",
    data_plane: Annotated[
        str | None,
        Opt(
            help="auto | relay | direct (docs/data-plane.md)",
            show_default="auto on tables, relay on images",
        ),
    ] = None,
) -> None:
    """Run coordinator + clients as real processes: train, predict, kill one, predict again."""
    from vfl_cli.certs_cmd import create_federation
    from vfl_cli.chaos import GuestLoss, running
    from vfl_cli.coordinator_client import CoordinatorClient
    from vfl_cli.remote_cmd import operator_security, render_evaluation
    from vfl_core.config import TrainConfig
    from vfl_core.data.datasets import load_dataset
    from vfl_core.data.prepare import prepare_parties
    from vfl_core.methods.registry import METHODS, method_spec
    from vfl_wire.security import OPERATOR

    if not 0 <= kill_block < clients:
        raise DemoError(f"--kill-block must be in 0..{clients - 1}")
    if method not in METHODS:
        raise DemoError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if not (0 <= fault_rate <= 1 and 0 < rejoin_rate <= 1 and fault_every > 0):
        raise DemoError("need 0 <= --fault-rate <= 1, 0 < --rejoin-rate <= 1, --fault-every > 0")
    if fault_kind not in ("kill", "freeze"):
        raise DemoError(f"--fault-kind must be kill or freeze, got {fault_kind!r}")
    if data_plane not in (None, "auto", "relay", "direct"):
        raise DemoError(f"--data-plane must be auto, relay or direct, got {data_plane!r}")
    faulty = fault_rate > 0
    # A demo is a new run: checkpoints of an earlier demo in this workdir would resume it.
    shutil.rmtree(workdir / "ckpt", ignore_errors=True)
    typer.echo(f"== LASER-VFL demo: {clients} parties on localhost, digits, seed {seed} ==")
    data_dir, logs, ckpt = workdir / "data", workdir / "logs", workdir / "ckpt"
    logs.mkdir(parents=True, exist_ok=True)
    typer.echo(f"[1/5] preparing {clients} party directories in {data_dir} (p_miss {p_miss})")
    parties = prepare_parties(
        load_dataset("digits"),
        data_dir,
        num_blocks=clients,
        p_miss_train=[p_miss] * clients,
        p_miss_test=[p_miss] * clients,
        test_fraction=0.2,
        seed=seed,
    )
    certs = workdir / "certs"  # throwaway: a new federation CA for the demo's workdir
    create_federation(certs, [f"party{k}" for k in range(clients)])
    typer.echo(
        f"      mutual TLS with throwaway certificates and tokens in {certs} (`vfl certs`); "
        f"samples aligned by PSI, so the coordinator never sees an ID or an ID hash"
    )
    security = operator_security(certs, OPERATOR, insecure=False)
    tls = ["--tls-dir", str(certs)]
    port = _free_port()
    address = f"127.0.0.1:{port}"
    with _processes() as procs, CoordinatorClient(address, 10.0, security) as watch:
        typer.echo(f"[2/5] starting coordinator at {address} and {clients} clients (logs: {logs})")
        procs["coordinator"] = _spawn(
            [
                "vfl_cli.coordinator_cmd",
                "--clients",
                str(clients),
                "--listen",
                address,
                "--serve",
                "--epochs",
                str(epochs),
                "--seed",
                str(seed),
                "--method",
                method,
                "--deadline",
                str(deadline),
                "--out",
                str(workdir / "run"),
                "--eval-every",  # test accuracy by epoch in epochs.jsonl and the report
                "5",
                "--no-progress",
                *tls,
                *(["--data-plane", data_plane] if data_plane is not None else []),
                # Restarted clients resume from these (and a restarted coordinator would too).
                *(
                    ["--checkpoint-dir", str(ckpt / "coordinator"), "--checkpoint-every", "20"]
                    if faulty
                    else []
                ),
            ],
            logs / "coordinator.log",
        )

        joins = Joins(watch)

        def start_client(k: int) -> subprocess.Popen:
            joins.starting(k)
            ckpt_args = ["--checkpoint-dir", str(ckpt / f"party{k}")] if faulty else []
            proc = _spawn(
                [
                    "vfl_cli.client_cmd",
                    "--data",
                    str(parties[k]),
                    "--coordinator",
                    address,
                    "--listen",
                    "127.0.0.1:0",
                    *tls,
                    *ckpt_args,
                ],
                logs / f"client{k}.log",
                append=f"client{k}" in procs,
            )
            procs[f"client{k}"] = proc
            return proc

        for k in range(clients):
            start_client(k)
        chaos = None
        if faulty:
            chaos = GuestLoss(
                {k: procs[f"client{k}"] for k in range(clients)},
                start_client,
                fault_rate,
                rejoin_rate,
                kind=fault_kind,  # type: ignore[arg-type]
                every=fault_every,
                seed=seed,
                ready=joins.joined,
            )
        with CoordinatorClient(address, timeout=120.0, security=security) as coord:
            typer.echo(
                f"[3/5] training {method_spec(method).display_name} for {epochs} epochs over gRPC"
            )
            if chaos is not None:
                typer.echo(
                    f"      guest loss: every {fault_every:g} s each client is {fault_kind}ed "
                    f"with probability {fault_rate:g} and comes back with {rejoin_rate:g}"
                )
            if chaos is not None:  # faults start with training, not while processes start
                _wait_phase(coord, "training", procs, logs)
            with running(chaos):
                # DVFL's label owner trains for its own epochs after the guests' and hosts'
                total = TrainConfig(method=method, epochs=epochs).total_epochs
                _wait_trained(coord, procs, total, logs, watch_clients=chaos is None)
            if chaos is not None:
                counts = ", ".join(f"{k} {v}" for k, v in sorted(chaos.counts().items()))
                typer.echo(f"      injected: {counts or 'nothing'}; waiting for every party")
                _wait_joined(joins.joined, clients)
            before = coord.evaluate("test")
            typer.echo("[4/5] inference with every party")
            typer.echo(render_evaluation(before, "test set, all parties"))
            victim = procs[f"client{kill_block}"]
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            typer.echo(
                f"[5/5] killed client{kill_block} (pid {victim.pid}, SIGKILL); inference again"
            )
            after = coord.evaluate("test")
            typer.echo(render_evaluation(after, f"test set, client{kill_block} dead"))
        outcome = kill_outcome(method, clients, kill_block)
        _summary(before.rows[-1].accuracy, after.rows[-1].accuracy, kill_block, workdir, outcome)
        _stop(procs)
    _report(workdir / "run")


def kill_outcome(method: str, clients: int, dead: int) -> str:
    """What the kill did to prediction. Every demo party holds labels, so the question is only
    whether the method can use the survivors' blocks."""
    from vfl_core.methods.registry import method_spec

    survivors = [k for k in range(clients) if k != dead]
    spec = method_spec(method)
    found = spec.predictors(survivors, clients, range(clients))
    if found is not None and not found:  # e.g. DVFL's label owner, a split-learning head party
        return (
            f"{spec.display_name} has no predictor without client{dead} (its head party), so "
            "no sample was predicted"
        )
    if found is None:
        return (
            f"{spec.display_name} cannot predict without every block, so the samples it "
            "could not use got random guesses"
        )
    return "prediction carried on without it"


def _summary(before: float, after: float, block: int, workdir: Path, outcome: str) -> None:
    typer.echo(
        f"\naccuracy with all parties {100 * before:.2f}%; after killing client{block} "
        f"{100 * after:.2f}%: {outcome}.\n"
        f"results: {workdir / 'run' / 'results.json'}; logs: {workdir / 'logs'}"
    )


def _report(run_dir: Path) -> None:
    """Write the run's report when matplotlib is there (a few seconds); else say how to."""
    from vfl_cli.report_cmd import has_matplotlib, write_report

    command = f"vfl report {run_dir}"
    if not has_matplotlib():
        typer.echo(f"report: pip install 'laser-vfl[report]', then `{command}`")
        return
    path = write_report(run_dir, run_dir / "report")
    typer.echo(f"report (curves, accuracy by set of parties, config): {path}")


def _wait_trained(
    coord: CoordinatorClient, procs: dict, epochs: int, logs: Path, watch_clients: bool = True
) -> None:
    from tqdm import tqdm

    from vfl_cli.coordinator_client import CoordinatorError

    with tqdm(total=epochs, desc="epochs", unit="ep", disable=None) as bar:  # a terminal only
        while True:
            for name, proc in list(procs.items()):
                # Under injected faults a killed client is expected; only the coordinator counts.
                if (watch_clients or name == "coordinator") and proc.poll() is not None:
                    raise DemoError(
                        f"{name} exited with code {proc.returncode}; see {logs / name}.log"
                    )
            with contextlib.suppress(CoordinatorError):
                status = coord.status()
                if status.phase in ("serving", "done"):
                    bar.update(epochs - bar.n)
                    return
                if status.phase == "training":
                    bar.update(max(0, status.epoch - bar.n))
            time.sleep(0.5)


def _wait_phase(coord: CoordinatorClient, phase: str, procs: dict, logs: Path) -> None:
    from vfl_cli.coordinator_client import CoordinatorError

    while True:
        if procs["coordinator"].poll() is not None:
            raise DemoError(f"coordinator exited; see {logs / 'coordinator.log'}")
        with contextlib.suppress(CoordinatorError):
            if coord.status().phase in (phase, "serving", "done"):
                return
        time.sleep(0.3)


def _wait_joined(joined: Callable[[int], bool], clients: int, timeout: float = 90.0) -> None:
    """After the faults: until every restarted client has registered again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(joined(k) for k in range(clients)):
            return
        time.sleep(0.3)
    raise DemoError(f"not every client registered again within {timeout:g} s after the faults")


class Joins:
    """Whether each block's newest process has registered, from the coordinator's Status RPC
    (not from the clients' logs): a block's registration generation grows when a new process
    registers for it."""

    def __init__(self, coord: CoordinatorClient) -> None:
        self._coord = coord
        self._before: dict[int, int] = {}  # block -> its generation before its newest process

    def starting(self, block: int) -> None:
        """Call before starting a process for `block` (its predecessor, if any, is gone)."""
        self._before[block] = self._generations().get(block, 0)

    def joined(self, block: int) -> bool:
        return self._generations().get(block, 0) > self._before.get(block, 0)

    def _generations(self) -> dict[int, int]:
        from vfl_cli.coordinator_client import CoordinatorError

        try:
            return self._coord.status().generations
        except CoordinatorError:  # not listening yet: nobody has registered
            return {}


def _spawn(args: list[str], log: Path, append: bool = False) -> subprocess.Popen:
    module, *rest = args
    with log.open("a" if append else "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, *rest],
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own session: a Ctrl-C reaches only the demo, which then stops everything itself.
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


@contextlib.contextmanager
def _processes() -> Iterator[dict[str, subprocess.Popen]]:
    procs: dict[str, subprocess.Popen] = {}
    try:
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _stop(procs: dict[str, subprocess.Popen]) -> None:
    """SIGTERM the coordinator: it ends serving and tells the clients to shut down."""
    procs["coordinator"].send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
