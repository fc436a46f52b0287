"""Run one party: load its directory, serve `Party`, register, work until told to stop."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path
from typing import Literal

import grpc
import torch
from pydantic import BaseModel, ConfigDict, Field

from vfl_client.data_plane import DataPlaneServicer, Mailbox, PeerLinks
from vfl_client.host import PartyHost, warm_up
from vfl_client.servicer import PartyServicer
from vfl_core.config import TrainConfig
from vfl_core.data.label_summary import class_counts, describe_classes, rare_class_warnings
from vfl_core.data.party_dir import PREPROCESS_FILE, PartyData, load_party_dir
from vfl_core.data.tabular import TableSource, load_table_party_kept
from vfl_core.errors import ConfigError, DataError
from vfl_core.persistence.checkpoint import party_checkpoint_path, save_party_checkpoint
from vfl_core.protocol import RUN_FINISHED, ServingChoice
from vfl_core.training import psi_workers
from vfl_core.training.alignment import DEMO_SECRET, UNMATCHED
from vfl_core.training.party import Party, party_info
from vfl_core.training.retry import reconnect_backoff
from vfl_wire import convert
from vfl_wire.channels import freeze_heap, make_server, plaintext_to_tls_hint, start_with_health
from vfl_wire.relay_crypto import RelayCrypto
from vfl_wire.security import COORDINATOR, GuardInterceptor, Security, load_security, party_policy
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

log = logging.getLogger(__name__)


class ClientConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    data: Path  # a party directory, or a CSV/Parquet file described by `table`
    table: TableSource | None = None  # set when `data` is the party's own table
    coordinator: str = "localhost:50051"
    block: int | None = Field(None, ge=0)  # checked against the party directory
    party_id: str | None = None  # default: party<block>
    # auto: 127.0.0.1:0 when the coordinator is on this host (nothing else can reach the
    # party), else 0.0.0.0:0 (the coordinator calls it back at the address it registered from)
    listen: str = "auto"
    advertise: str | None = None  # host:port the coordinator should call; default: as seen by it
    device: str = "auto"
    secret: str = "vfl-demo-secret"
    threads: int = Field(1, ge=1)
    register_timeout_s: float = Field(300.0, gt=0)
    checkpoint_dir: Path | None = None  # periodic (vfl_client.host) and <party_id>.pt at the end
    tls_dir: Path | None = Path("certs")  # `vfl certs` output (or this party's directory of it)
    insecure: bool = False  # plaintext gRPC instead of mutual TLS
    token_file: Path | None = None  # default: <tls_dir>/<party_id>/token
    alignment: Literal["psi", "hmac"] = "psi"  # psi: never hand out ID hashes (IdHashes refused)
    bundle_dir: Path | None = None  # the serving bundle is written here when training ends
    # the seed of this party's orthogonal tower (--privacy-feature-tower orthogonal): known to
    # this organisation only, never sent (vfl_core.privacy.private_tower)
    private_tower_seed: int | None = Field(None, ge=0, le=2**63 - 1)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available on this machine")
    if name != "cpu" and not name.startswith("cuda"):
        raise ConfigError(f"--device must be auto, cpu or cuda[:N], not {name!r}")
    return torch.device(name)


def run_client(config: ClientConfig, stop: threading.Event | None = None) -> str:
    """Serve until the coordinator says Shutdown or a signal arrives; returns why it stopped.

    With `config.checkpoint_dir` the party's state is saved there when the coordinator asks
    (and resumed from on a restart, see vfl_client.host) and when the run ends.
    """
    data = _load_data(config)
    log_classes(data)
    if coordinator_on_this_host(config.coordinator):  # a demo or test: the parties share the cores
        psi_workers.share_cores(data.meta.num_blocks)
    device = resolve_device(config.device)
    torch.set_num_threads(config.threads)
    party_id = _party_id(config, data.meta.block)
    security = load_security(
        config.tls_dir, config.insecure, party_id, token_file=config.token_file, need_token=True
    )
    warm_up()  # before listening: once registered, the party is built and rejoins at once
    servicer = PartyServicer(party_id, threads=config.threads)
    if security.identity is not None:  # its signed relay key goes with every registration
        servicer.relay = RelayCrypto(security.identity, data.meta.block)
    # the direct data plane's end (used when the run says so), served beside Party
    servicer.links = PeerLinks(party_id, data.meta.block, security, Mailbox())
    listen = listen_address(config.listen, config.coordinator)
    server, port = start_server(servicer, listen, security, _refused_calls(config))
    address = advertised_address(config.advertise, listen, port)
    freeze_heap()
    stop = stop or stop_on_signals()
    run_id, reason = "", "stopped before joining a run"
    try:
        party, run_id, lease = _join(
            config, data, party_id, device, address, stop, servicer, security
        )
        servicer.attach(party, run_id)
        host = PartyHost(  # heartbeats, resynchronisation, periodic checkpoints
            servicer,
            party.info,
            address,
            run_id,
            lambda: security.channel(config.coordinator, COORDINATOR),
            secret=config.secret,
            checkpoint_dir=config.checkpoint_dir,
            unreachable_timeout_s=config.register_timeout_s,
            lease=lease,
        )
        reason = "interrupted"  # kept if serving ends with an exception
        reason = host.serve(stop)
        if reason.startswith(UNMATCHED):  # refused before training: say why, with own IDs
            raise DataError(f"{reason}. This party's training IDs begin {_first_ids(data)}")
        return reason
    finally:
        server.stop(grace=1.0).wait()  # every handler has returned: nothing changes the party now
        if servicer.links is not None:
            servicer.links.close()
        if config.checkpoint_dir is not None and servicer.party is not None:
            save_end_checkpoint(config.checkpoint_dir, servicer.party, run_id, reason)
        if config.bundle_dir is not None and servicer.party is not None:
            choice = servicer.serving_choice
            write_bundle_if_finished(servicer.party, config.bundle_dir, reason, choice)


def _first_ids(data: PartyData, count: int = 3) -> str:
    """A few of this party's training IDs, for its own error (they never leave it): beside
    another party's, they show how the two write their IDs."""
    split = data.splits.get("train")
    ids = [] if split is None else [str(i) for i in split.ids[:count]]
    return ", ".join(map(repr, ids)) or "(none)"


def write_bundle_if_finished(
    party: Party, directory: Path, reason: str, choice: ServingChoice | None = None
) -> None:
    """The serving bundle, once the coordinator said the run finished: a party stopped before
    (a signal, a lost coordinator, a failed run) holds weights of part of the training, which
    served beside the others' trained ones would answer silently wrong (a bundle from an
    earlier run in `directory` is kept)."""
    if reason != RUN_FINISHED:
        log.warning(
            "no serving bundle written to %s: the run did not finish for this party (%s), so "
            "its weights are not the trained ones; once it has, `vfl export --checkpoint` "
            "makes the bundle from the party's end checkpoint",
            directory,
            reason,
        )
        return
    from vfl_core.serving.bundle import write_bundle  # torch.jit: only when asked

    write_bundle(party, directory, choice=choice)


def listen_address(listen: str, coordinator: str) -> str:
    """`listen`, or for "auto" the loopback interface when the coordinator is on this host
    (a party serves only the coordinator: no reason to listen where others can reach it), else
    every interface."""
    if listen != "auto":
        return listen
    return "127.0.0.1:0" if coordinator_on_this_host(coordinator) else "0.0.0.0:0"


def advertised_address(advertise: str | None, listen: str, port: int) -> str:
    """host:port the coordinator is told to call: --advertise, else the loopback address the
    party listens on, else ":port" (the coordinator takes the host it sees the call from). A
    loopback listener is named: `localhost` may reach the coordinator over ::1, where a party
    listening on 127.0.0.1 cannot be called back."""
    if advertise:
        return advertise
    host = listen.rpartition(":")[0]
    return f"{host}:{port}" if coordinator_on_this_host(listen) and host else f":{port}"


def coordinator_on_this_host(coordinator: str) -> bool:
    host = coordinator.rpartition(":")[0].strip("[]") or "localhost"
    return host == "localhost" or host == "::1" or host.startswith("127.")


def log_classes(data: PartyData) -> None:
    """A label party says which classes it found, and warns of a class with very few rows."""
    counts = class_counts(data)
    if counts:
        log.info("block %d: %s", data.meta.block, describe_classes(counts))
    for warning in rare_class_warnings(counts):
        log.warning("block %d: %s", data.meta.block, warning)


def _party_id(config: ClientConfig, block: int) -> str:
    party_id = config.party_id or f"party{block}"
    if config.checkpoint_dir is not None:
        party_checkpoint_path(config.checkpoint_dir, party_id)  # refuse a bad name up front
    return party_id


def _load_data(config: ClientConfig) -> PartyData:
    if config.table is not None:
        # The fit is kept next to the checkpoints, so a restarted party reuses it.
        party_id = _party_id(config, config.table.block)
        keep = None
        if config.checkpoint_dir is not None:
            keep = config.checkpoint_dir / f"{party_id}.{PREPROCESS_FILE}"
        data = load_table_party_kept(config.table, keep)
        for warning in data.warnings:  # numbers that look like codes
            log.warning("%s", warning)
        return data
    data = load_party_dir(config.data)
    if config.block is not None and config.block != data.meta.block:
        raise ConfigError(f"--block {config.block} but {config.data} holds block {data.meta.block}")
    return data


def _join(
    config: ClientConfig,
    data: PartyData,
    party_id: str,
    device: torch.device,
    address: str,
    stop: threading.Event,
    servicer: PartyServicer,
    security: Security,
) -> tuple[Party, str, str]:
    """Register with the coordinator and build the Party with the run's TrainConfig; returns it,
    the run id and this process's lease."""
    info = party_info(party_id, data)
    key = servicer.relay.key_message if servicer.relay is not None else None
    reply = register(
        config.coordinator, info, address, config.register_timeout_s, stop, security, key
    )
    train = TrainConfig.model_validate_json(reply.config_json)
    if train.encrypt_relay and servicer.relay is None:
        raise ConfigError(
            f"run {reply.run_id} encrypts its relay (--encrypt-relay): start vfl-client with "
            "--tls-dir (the relay keys are signed with the party's certificate)"
        )
    log.info("party %s (block %d) joined run %s on %s", party_id, info.block, reply.run_id, device)
    seed = tower_seed(config, train, data.meta.has_labels, reply.run_id)
    party = Party(
        party_id, data, train, secret=config.secret.encode(), device=device, tower_seed=seed
    )
    return party, reply.run_id, reply.lease


def tower_seed(
    config: ClientConfig, train: TrainConfig, has_labels: bool, run_id: str
) -> int | None:
    """This party's private tower seed, required where the run gives a feature-only party an
    orthogonal tower (drawn from the federation's seed, every party could rebuild it)."""
    drawn = train.privacy.feature_tower != "model" and not has_labels
    if drawn and config.private_tower_seed is None:
        raise ConfigError(
            f"run {run_id} gives feature-only parties an orthogonal tower "
            "(--privacy-feature-tower): start vfl-client with --private-tower-seed, a seed "
            "only this organisation keeps"
        )
    return config.private_tower_seed


def _refused_calls(config: ClientConfig) -> dict[str, str]:
    """A party that aligns by PSI never sends keyed ID hashes, whoever asks (the default
    secret is public, so its hashes could be matched against guessed IDs)."""
    if config.alignment == "psi":
        return {"IdHashes": "this party aligns by PSI only (start it with --alignment hmac)"}
    if config.secret == DEMO_SECRET:
        log.warning("--alignment hmac with the public demo secret: set --secret / VFL_SECRET")
    return {}


# Calls a party accepts at once (each gets a body reader at once): room for three peers at
# their PARTY_MAX_INFLIGHT (a flooding connection's cap) and the calls of an honest one.
MAX_CONCURRENT_RPCS = 64
# Worker threads of a party's server. On the direct data plane a party holds up to three Round
# calls (vfl_core.training.direct.AHEAD + 1, each waiting for its round) while its peers' pushes
# arrive (one per peer and direction): a push must not wait for a free thread.
SERVER_THREADS = 16
# Calls in flight from one peer (the coordinator's Round calls, a peer's pushes) before
# RESOURCE_EXHAUSTED: with --staleness the coordinator keeps up to 2 + 2S + 4 rounds' calls
# and a validation call at a party (vfl_core.training.direct_stale.LEAD), beyond the guard's
# default of 8; all calls together stay within MAX_CONCURRENT_RPCS.
PARTY_MAX_INFLIGHT = 16


def start_server(
    servicer: PartyServicer,
    listen: str,
    security: Security,
    refuse: dict[str, str] | None = None,
) -> tuple[grpc.Server, int]:
    # only the coordinator's certificate may call (vfl_wire.security), a few calls at a time
    guard = GuardInterceptor(
        secure=security.secure,
        policy=party_policy,
        refuse=refuse,
        readers=MAX_CONCURRENT_RPCS,
        max_inflight=PARTY_MAX_INFLIGHT,
    )
    server = make_server(SERVER_THREADS, [guard], max_concurrent_rpcs=MAX_CONCURRENT_RPCS)
    vfl_pb2_grpc.add_PartyServicer_to_server(servicer, server)
    if servicer.links is not None:  # other parties push embeddings and gradients here
        vfl_pb2_grpc.add_DataPlaneServicer_to_server(DataPlaneServicer(servicer.links), server)
    port = start_with_health(server, listen, security.server_credentials())
    return server, port


def save_end_checkpoint(directory: Path, party: Party, run_id: str, reason: str) -> Path:
    """Save `directory/<party_id>.pt`: the party's state and its TrainConfig (reusable for
    periodic checkpoints)."""
    try:
        path = save_party_checkpoint(directory, party, {"run_id": run_id, "reason": reason})
    except OSError as err:
        raise DataError(f"cannot write a checkpoint to {directory}: {err}") from None
    log.info("party %s saved its state at round %d to %s", party.party_id, party.last_round, path)
    return path


def register(
    coordinator: str,
    info,
    address: str,
    timeout: float,
    stop: threading.Event,
    security: Security | None = None,
    relay_key: vfl_pb2.RelayKey | None = None,
) -> vfl_pb2.RegisterReply:
    """Register, retrying with exponential backoff and jitter until the coordinator is up; a
    failure that retrying cannot heal (TLS on one side only, a refusal) stops at once."""
    request = convert.register_request_to_proto(
        info, address, convert.header("", info.party_id), relay_key=relay_key
    )
    start = time.monotonic()
    backoff = reconnect_backoff(cap=5.0)
    security = security or Security(None)
    with security.channel(coordinator, COORDINATOR) as channel:
        stub = vfl_pb2_grpc.CoordinatorStub(channel)
        while True:
            try:
                return stub.Register(request, timeout=10.0)
            except grpc.RpcError as err:
                _refuse_for_good(err, coordinator, security)
                spent = time.monotonic() - start
                if spent + backoff.planned > timeout or stop.is_set():
                    raise ConfigError(
                        f"coordinator at {coordinator} unreachable for {spent:.0f}s "
                        f"({err.code().name}: {(err.details() or '').splitlines()[0][-200:]})"
                    ) from None
                pause = backoff.next()
                log.info(
                    "coordinator at %s not reachable yet; retrying in %.1fs", coordinator, pause
                )
                stop.wait(pause)


def _refuse_for_good(err: grpc.RpcError, coordinator: str, security: Security) -> None:
    """Raise ConfigError for a failure that does not heal by retrying: a refusal, a TLS handshake
    that failed on certificates, or TLS on one side only (a plaintext client of a TLS server sees
    "Socket closed"). A handshake cut short (a frozen or restarting coordinator: "Handshake read
    failed (Endpoint closing)") is retried like any unreachable coordinator."""
    if err.code() not in _RETRY:
        raise ConfigError(
            f"coordinator refused registration: {err.code().name}: {err.details()}"
        ) from None
    details = (err.details() or "").splitlines()[0] if err.details() else ""
    if security.secure and any(mark in details for mark in _TLS_FAILED):
        if "WRONG_VERSION_NUMBER" in details:  # the cause is known: no C-core text
            raise ConfigError(
                f"TLS handshake with the coordinator at {coordinator} failed: it does not speak "
                "TLS (started with --insecure?); give every process the same `vfl certs` "
                "directory with --tls-dir, or --insecure to all"
            ) from None
        raise ConfigError(
            f"TLS handshake with the coordinator at {coordinator} failed (a certificate of "
            f"another CA, or the wrong name?): {_tls_reason(details)}"
        ) from None
    hint = None if security.secure else plaintext_to_tls_hint(coordinator, err)
    if hint is not None:
        raise ConfigError(hint) from None


def _tls_reason(details: str) -> str:
    """grpc's words for a failed handshake, without its trailing status (": OK" and the like:
    the C core appends the last call's status, which read as if all were well)."""
    reason = details[-200:]
    while reason.endswith((": OK", ":OK")):
        reason = reason.rsplit(":", 1)[0].rstrip()
    return reason


# What grpc's details say when TLS itself failed (a certificate refused, a name that does not
# match, a plaintext server), as opposed to a connection closed or timed out mid-handshake.
_TLS_FAILED = ("Tls handshake failed", "TSI_PROTOCOL_FAILURE", "SSL_ERROR_SSL")
_RETRY = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (handlers only from the main thread)."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    return stop
