"""Run a real federation for integration tests: vfl-coordinator and vfl-client processes.

Every process is started from the installed console scripts in its own process group (so a
signal reaches it and anything it spawns), dies with the test process (`setpriv --pdeathsig`,
where util-linux has it; no fork-time Python code runs in a process that holds gRPC threads), logs
to a file under the cluster's directory, and is killed by `Cluster.close()`, which then checks
that nothing is left. The coordinator listens on a free port chosen here (below the ephemeral
range, `reserved_port`), so its clients start together with it and a restarted coordinator
(`Cluster.restart`, same command) listens where it did; it reports the port with --port-file;
clients bind 127.0.0.1:0 and their port is read from their log.

    with Cluster(tmp_path) as cluster:
        coord, clients = cluster.federation(party_dirs, epochs=2)
        cluster.wait_for(lambda: coord.results(), 120, "results.json")
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypeVar

import grpc
import numpy as np
import torch

from vfl_client.servicer import PartyServicer
from vfl_coordinator.registry import Registry
from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.inference.metrics import EvalReport
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_core.training.engine import Callbacks, Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.channels import bind, make_channel, make_server
from vfl_wire.security import (
    COORDINATOR,
    OPERATOR,
    GuardInterceptor,
    Security,
    load_identity,
    party_policy,
)
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")

BIN = Path(sys.executable).parent  # the venv's bin: vfl, vfl-client, vfl-coordinator
SECRET = "vfl-harness-secret"  # the federation secret every harness client gets
START_TIMEOUT_S = 90.0  # a loaded 2-core machine needs ~5 s to import torch per process
_SETPRIV = shutil.which("setpriv")
_PORT_LINE = re.compile(r"listening on \S+ \(port (\d+)\)")


# ------------------------------------------------------------------------------ data


def prepare_digits(
    base: Path, *, p_miss: float = 0.1, seed: int = 0, clients: int = 4
) -> list[Path]:
    """Party directories of digits, prepared once per `base` with the real `vfl prepare`."""
    out = base / f"digits-k{clients}-p{p_miss}-s{seed}"
    done = out / ".complete"
    if not done.exists():
        argv = [str(BIN / "vfl"), "prepare", "--out", str(out), "--dataset", "digits"]
        argv += ["--clients", str(clients), "--p-miss", str(p_miss), "--seed", str(seed)]
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
        done.touch()
    return [out / f"party{k}" for k in range(clients)]


def digits_parties(
    base: Path, clients: int, train: TrainConfig, p_miss: float = 0.0
) -> dict[int, Party]:
    """In-process Parties of digits in `clients` blocks (block -> Party), prepared in `base`
    with `p_miss` missing at train and test: for tests of logic in this one process."""
    misses = [p_miss] * clients
    paths = prepare_parties(load_digits_dataset(), base, clients, misses, misses, 0.2, seed=0)
    data = [load_party_dir(path) for path in paths]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}


def train_in_process(
    party_dirs: Sequence[Path], train: TrainConfig
) -> tuple[dict[int, Party], list[RoundRecord], EvalReport]:
    """The federation a harness cluster runs, in this process (the reference the real processes
    are compared with): its trained parties, every round record and the test evaluation."""
    data = [load_party_dir(d) for d in party_dirs]
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET.encode()) for d in data
    }
    records: list[RoundRecord] = []
    fed = Federation(InProcessTransport(parties), train, progress=False, on_round=records.append)
    fed.align()
    fed.train()
    return parties, records, fed.evaluate("test")


Reference = tuple[dict[int, Party], list[RoundRecord], EvalReport]
_REFERENCES: dict[tuple[tuple[str, ...], str], Reference] = {}


def train_in_process_once(party_dirs: Sequence[Path], train: TrainConfig) -> Reference:
    """train_in_process, computed once per process for the same directories and configuration
    (the seed fixes every float, so a second run would give the same parties, records and
    report). The caller only reads what it gets: the parties are shared with later callers."""
    key = (tuple(str(d) for d in party_dirs), train.model_dump_json())
    if key not in _REFERENCES:
        _REFERENCES[key] = train_in_process(party_dirs, train)
    return _REFERENCES[key]


@contextlib.contextmanager
def party_servers(parties: dict[int, Party], run_id: str) -> Iterator[Registry]:
    """Each party behind the real PartyServicer and guard on 127.0.0.1:0 in this process,
    registered with a coordinator's Registry (for a GrpcTransport); stopped on exit."""
    servers, registry = [], Registry(next(iter(parties.values())).data.meta.num_blocks)
    try:
        for party in parties.values():
            servicer = PartyServicer(party.party_id)
            servicer.attach(party, run_id)
            server = make_server(8, [GuardInterceptor(secure=False, policy=party_policy)])
            vfl_pb2_grpc.add_PartyServicer_to_server(servicer, server)
            port = bind(server, "127.0.0.1:0")
            server.start()
            servers.append(server)
            registry.register(party.info, f"127.0.0.1:{port}")
        yield registry
    finally:
        for server in servers:
            server.stop(0).wait()


def assert_checkpoints_match(ckpt: Path, parties: dict[int, Party], train: TrainConfig) -> None:
    """Every client's final checkpoint (`vfl-client --checkpoint-dir ckpt`) holds exactly the
    weights of the same party trained in this process."""
    for block, party in parties.items():
        saved = load_checkpoint(ckpt / f"party{block}.pt", train.model_dump_json())
        copy = type(party)(party.party_id, party.data, train, secret=SECRET.encode())
        copy.load_state_dict(saved["state"])
        np.testing.assert_array_equal(copy.parameters_vector(), party.parameters_vector())


# ------------------------------------------------------------------------------ waiting


class Crash(Exception):
    """The coordinator dies right after writing a checkpoint."""


def resume_after_crash(
    data: Sequence[PartyData], train: TrainConfig, crash_at: int, secret: bytes
) -> dict:
    """Train in process with a checkpoint every 10 rounds, through and again dying right after
    the checkpoint of round `crash_at`; then fresh parties loaded from that checkpoint and a
    fresh engine restored from its snapshot train on. Asserts the resumed run is bit-identical to
    the one that never crashed (losses, parameters, method stats, evaluation); returns the
    snapshot it resumed from."""
    saved: dict[int, dict[int, bytes]] = {}  # round -> block -> the party's state
    snapshots: dict[int, dict] = {}

    def parties() -> dict[int, Party]:
        return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=secret) for d in data}

    def save(p: Party, round_id: int) -> None:
        buffer = io.BytesIO()
        torch.save(p.state_dict(), buffer)
        saved.setdefault(round_id, {})[p.block] = buffer.getvalue()

    def run(crash: int | None) -> tuple[Federation, dict[int, Party]]:
        members = parties()
        fed = Federation(
            InProcessTransport(members, save), train, progress=False, checkpoint_every=10
        )

        def on_checkpoint(round_id: int, _: set[int]) -> None:
            snapshots[round_id] = json.loads(json.dumps(fed.snapshot()))
            if round_id == crash:
                raise Crash

        fed.observers.append(Callbacks(checkpoint=on_checkpoint))
        fed.align()
        if crash is None:
            fed.train()
        else:
            with contextlib.suppress(Crash):
                fed.train()
                raise AssertionError(f"the run never checkpointed round {crash}")
        return fed, members

    reference, ref_parties = run(None)
    run(crash_at)
    restored = parties()
    for block, party in restored.items():
        party.load_state_dict(torch.load(io.BytesIO(saved[crash_at][block]), weights_only=True))
    fed = Federation(InProcessTransport(restored), train, progress=False)
    fed.align()
    fed.restore(snapshots[crash_at])
    summaries = fed.train()

    assert [s.mean_loss for s in summaries] == [s.mean_loss for s in reference.cursor.summaries]
    for block, party in ref_parties.items():
        np.testing.assert_array_equal(
            restored[block].parameters_vector(), party.parameters_vector()
        )
    assert fed.method_stats() == reference.method_stats()
    assert fed.evaluate().to_json() == reference.evaluate().to_json()
    return snapshots[crash_at]


def wait_for(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    diagnose: Callable[[], str] | None = None,
) -> T:
    """Poll `condition` until it returns something truthy; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{diagnose()}" if diagnose is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


# ------------------------------------------------------------------------------ processes


def reserved_port() -> int:
    """A free TCP port on 127.0.0.1 below the kernel's ephemeral range, so that no connection
    or `:0` bind of another process is handed it between this check and the server's bind."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    # pytest-xdist workers draw from disjoint residues, so two never pick the same port
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    candidates = range(max(1024, low - 12000) + worker, low, workers)
    rng = random.Random()  # the OS's entropy
    for _ in range(200):
        port = rng.choice(candidates)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found below {low}")


def _die_with_parent(argv: list[str]) -> list[str]:
    """`argv` prefixed so that the process is SIGKILLed if the test process dies."""
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv] if _SETPRIV else argv


@dataclass
class Proc:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen = field(repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        """Send `sig` to the process group (the process and anything it started)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """The exit code; AssertionError (with the log's tail) if still running after `timeout`."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout:.0f}s\n{self.tail()}"
            ) from None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 25) -> str:
        text = "\n".join(self.log().splitlines()[-lines:])
        return f"--- {self.name} (pid {self.pid}, rc {self.popen.poll()}) ---\n{text}"


@dataclass
class Client(Proc):
    data: Path = Path()

    def port(self, timeout: float = START_TIMEOUT_S) -> int:
        """The port the client serves `Party` on, from its log."""
        match = wait_for(
            lambda: _PORT_LINE.search(self.log()), timeout, f"{self.name} port", diagnose=self.tail
        )
        return int(match.group(1))

    @property
    def block(self) -> int:
        return json.loads((self.data / "meta.json").read_text())["block"]


@dataclass
class Coordinator(Proc):
    out: Path = Path()
    port_file: Path = Path()
    run_id: str = ""
    alignment: str = "hmac"  # its --alignment, which its clients must share
    # rounds.jsonl's complete lines read so far and their records: tests poll rounds() every
    # 50 ms while thousands of rounds accumulate, and parsing them all again each time took a
    # share of a core from the federation they wait for (not copied by Cluster.restart)
    _read: tuple[bytes, list[dict]] = field(default=(b"", []), init=False, repr=False)

    @property
    def planned_address(self) -> str:
        """Where clients reach it: known from its command line when it listens on a fixed port
        (no need to wait for it to start), else read from its port file once it listens."""
        listen = [v for k, v in zip(self.argv, self.argv[1:], strict=False) if k == "--listen"]
        host, _, port = (listen[-1] if listen else ":0").rpartition(":")
        if int(port) == 0:
            return self.address
        return f"{'127.0.0.1' if host in ('', '0.0.0.0', '[::]') else host}:{port}"

    def port(self, timeout: float = START_TIMEOUT_S) -> int:
        def read() -> int | None:
            with contextlib.suppress(FileNotFoundError, ValueError):
                return int(self.port_file.read_text())
            if not self.alive():
                raise AssertionError(f"coordinator exited before listening\n{self.tail()}")
            return None

        return wait_for(read, timeout, "the coordinator's port file", diagnose=self.tail)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port()}"

    def rounds(self) -> list[dict]:
        """The round records written so far (complete lines only). Only lines added since the
        last call are parsed; a file that no longer starts with what was read (a resumed run
        rewrote it) is parsed again from the start. Each call returns new dicts (callers pop
        keys from them); the lists and dicts inside are shared between calls."""
        try:
            data = (self.out / "rounds.jsonl").read_bytes()
        except FileNotFoundError:
            return []
        seen, records = self._read
        if not data.startswith(seen):
            seen, records = b"", []
        end = data.rfind(b"\n") + 1  # past the last complete line
        if end > len(seen):
            records = records + [json.loads(line) for line in data[len(seen) : end].splitlines()]
            seen = data[:end]
        self._read = (seen, records)
        return [dict(record) for record in records]

    def results(self) -> dict | None:
        try:
            return json.loads((self.out / "results.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):  # not yet, or being written
            return None


class Cluster:
    """The processes of one test. Use as a context manager (or call close()).

    Security: with `tls_dir` (a `vfl certs` directory) every process runs mutual TLS with its own
    identity and the test's stubs call as the operator (coordinator) or the coordinator (party);
    without it every process runs --insecure, as the tests written before TLS expect.
    Coordinators align with --alignment hmac unless told otherwise (those tests build batch
    digests from the keyed hashes and compare with HMAC-aligned simulations).
    """

    def __init__(self, root: Path, tls_dir: Path | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.tls_dir = tls_dir
        self.procs: list[Proc] = []
        self._channels: dict[tuple[str, str], grpc.Channel] = {}

    def _security_args(self) -> list[str]:
        return ["--insecure"] if self.tls_dir is None else ["--tls-dir", str(self.tls_dir)]

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------- starting
    def _spawn(self, kind: type[Proc], name: str, argv: list[str], **extra: object) -> Proc:
        log_path = self.root / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with log_path.open("wb") as log_file:
            popen = subprocess.Popen(
                _die_with_parent(argv),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: killpg reaches everything it starts
                env=env,
                cwd=self.root,
            )
        proc = kind(name=name, argv=argv, log_path=log_path, popen=popen, **extra)
        self.procs.append(proc)
        log.info("started %s (pid %d): %s", name, popen.pid, " ".join(argv))
        return proc

    def restart(self, proc: Proc, more_args: Sequence[str] = ()) -> Proc:
        """Run `proc`'s command again (same argv, out and data directories; a new log file),
        with `more_args` appended (a later option overrides an earlier one)."""
        base = {f.name for f in fields(Proc)}
        extra = {
            f.name: getattr(proc, f.name) for f in fields(proc) if f.init and f.name not in base
        }
        argv = [*proc.argv, *more_args]
        return self._spawn(type(proc), f"{proc.name}-r{len(self.procs)}", argv, **extra)

    def coordinator(
        self,
        *,
        clients: int = 4,
        epochs: int = 2,
        deadline: float | None = None,
        serve: bool = False,
        extra: Sequence[str] = (),
        name: str = "coordinator",
        alignment: str = "hmac",
        wrap: Sequence[str] = (),
    ) -> Coordinator:
        """`wrap`: a command the coordinator runs under, e.g. `prlimit --nofile=128:4096 --`."""
        out, port_file = self.root / f"{name}-out", self.root / f"{name}.port"
        run_id = f"run-{os.getpid()}-{len(self.procs)}"
        argv = [*wrap, str(BIN / "vfl-coordinator"), "--clients", str(clients)]
        argv += ["--epochs", str(epochs)]
        argv += ["--listen", f"127.0.0.1:{reserved_port()}", "--port-file", str(port_file)]
        argv += ["--out", str(out)]
        argv += ["--run-id", run_id, "--no-progress", "--register-timeout", "120"]
        # a killed party is not waited for at the end (10 s a test); tests/test_farewell.py
        # overrides it (a later option wins)
        argv += ["--farewell", "0"]
        if deadline is not None:
            argv += ["--deadline", str(deadline)]
        if serve:
            argv.append("--serve")
        argv += [*self._security_args(), "--alignment", alignment]
        # the tests written for the relay keep it; a test of the direct plane or of the default
        # (auto) gives --data-plane in `extra` (a later option wins)
        argv += ["--data-plane", "relay"]
        argv += list(extra)
        proc = self._spawn(
            Coordinator,
            name,
            argv,
            out=out,
            port_file=port_file,
            run_id=run_id,
            alignment=alignment,
        )
        assert isinstance(proc, Coordinator)
        return proc

    def client(self, coordinator: Coordinator, data: Path, extra: Sequence[str] = ()) -> Client:
        name = f"client-{data.name}-{len(self.procs)}"
        address = coordinator.planned_address
        argv = [str(BIN / "vfl-client"), "--data", str(data), "--coordinator", address]
        argv += ["--listen", "127.0.0.1:0", "--secret", SECRET, "--register-timeout", "120"]
        argv += [*self._security_args(), "--alignment", coordinator.alignment, *extra]
        proc = self._spawn(Client, name, argv, data=data)
        assert isinstance(proc, Client)
        return proc

    def federation(
        self,
        party_dirs: Sequence[Path],
        *,
        client_extra: Callable[[Path], Sequence[str]] | None = None,
        **coordinator_args: object,
    ) -> tuple[Coordinator, list[Client]]:
        """A coordinator for len(party_dirs) parties and one client per directory, all started
        at once: the coordinator listens on a port chosen here, so the clients need not wait for
        it (each process spends seconds importing torch; started one after the other, one of the
        two cores idles while the coordinator does)."""
        coord = self.coordinator(clients=len(party_dirs), **coordinator_args)  # type: ignore[arg-type]
        clients = [
            self.client(coord, d, client_extra(d) if client_extra else ()) for d in party_dirs
        ]
        return coord, clients

    # -------------------------------------------------------------------------- using
    def channel(
        self, address: str, peer: str = COORDINATOR, caller: str = OPERATOR
    ) -> grpc.Channel:
        """One channel per address (and TLS identity), closed by close(). With TLS it calls as
        `caller` and accepts only the certificate of `peer`."""
        key = (address, caller)
        if key not in self._channels:
            if self.tls_dir is None:
                self._channels[key] = make_channel(address)
            else:
                me = load_identity(self.tls_dir, caller, need_token=caller != COORDINATOR)
                self._channels[key] = Security(me).channel(address, peer)
        return self._channels[key]

    def stub(self, coordinator: Coordinator) -> vfl_pb2_grpc.CoordinatorStub:
        return vfl_pb2_grpc.CoordinatorStub(self.channel(coordinator.address))

    def party_stub(self, client: Client) -> vfl_pb2_grpc.PartyStub:
        address = f"127.0.0.1:{client.port()}"
        peer = f"party{client.block}"
        return vfl_pb2_grpc.PartyStub(self.channel(address, peer=peer, caller=COORDINATOR))

    def wait_for(self, condition: Callable[[], T], timeout: float, what: str) -> T:
        """As `wait_for`; on timeout the message carries every process's log tail."""
        return wait_for(condition, timeout, what, diagnose=self.describe)

    def wait_serving(self, coordinator: Coordinator, timeout: float) -> None:
        """Until `coordinator` serves predictions (training over, --serve). One that exits first
        fails at once; one not listening yet (just restarted) is waited for."""
        stub = self.stub(coordinator)
        request = vfl_pb2.StatusRequest(header=convert.header("", "operator"))

        def serving() -> bool:
            if not coordinator.alive():
                raise AssertionError(f"{coordinator.name} exited before serving")
            try:
                return stub.Status(request, timeout=10).state == "serving"
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                return False

        self.wait_for(serving, timeout, f"{coordinator.name} to serve after training")

    def wait_rounds(self, coordinator: Coordinator, count: int, timeout: float) -> list[dict]:
        def enough() -> list[dict] | None:
            rounds = coordinator.rounds()
            if len(rounds) < count and not coordinator.alive():
                raise AssertionError(f"coordinator exited after {len(rounds)} rounds")
            return rounds if len(rounds) >= count else None

        return self.wait_for(enough, timeout, f"{count} rounds in rounds.jsonl")

    def describe(self) -> str:
        return "\n".join(p.tail() for p in self.procs)

    # -------------------------------------------------------------------------- cleanup
    def close(self) -> None:
        """Kill every process group (stopped ones too), reap, then check that nothing is left."""
        for channel in self._channels.values():
            channel.close()
        for proc in self.procs:
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=10)
        deadline = time.monotonic() + 10
        while (leftovers := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not leftovers, f"processes left after cleanup: {leftovers}"

    def leftovers(self) -> list[str]:
        """Processes of this cluster still present: unreaped leaders, any member of one of its
        process groups, or any process whose command line names the cluster's directory."""
        found = [f"{p.name} (pid {p.pid})" for p in self.procs if p.popen.poll() is None]
        groups = {p.pid for p in self.procs}
        marker = str(self.root)
        for pid, pgid, cmdline in _processes():
            if pid != os.getpid() and (pgid in groups or marker in cmdline):
                found.append(f"pid {pid} (group {pgid}): {cmdline[:200]}")
        return found


def _processes() -> Iterable[tuple[int, int, str]]:
    """(pid, process group, command line) of every live, non-zombie process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        yield int(entry.name), int(fields[2]), cmdline
