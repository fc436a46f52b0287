"""`vfl-client --serve-bundle DIR`: a party in serving mode.

It loads its bundle (vfl_core.serving.bundle) and its feature table (reloaded when the file
changes), and serves `Serving/ServeEmbed` to the gateway. A label party started with `--peer`s is
the gateway: it also serves `Serving/ServePredict` (and, with `--http`, JSON over HTTP), asking
its peers over one long-lived channel each, through a batching window. No coordinator is
involved. Stops on SIGTERM or SIGINT."""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from pathlib import Path

import grpc
import torch
from grpc_health.v1 import health, health_pb2_grpc
from grpc_health.v1.health_pb2 import HealthCheckResponse
from pydantic import BaseModel, ConfigDict, Field

from vfl_client.runner import resolve_device, stop_on_signals
from vfl_client.serving_access import (
    MAX_CONCURRENT_RPCS,
    MAX_INFLIGHT_PER_PEER,
    MAX_REQUEST_BYTES,
    ServingPolicy,
)
from vfl_client.serving_app import DEFAULT_WORKERS, ServingApp
from vfl_client.serving_auth import (
    AuthMode,
    Authorizer,
    read_token_digests,
    resolve_mode,
    token_file_default,
)
from vfl_client.serving_health import READY, WARMING, Readiness
from vfl_client.serving_http import ConnectionGuard, HttpEndpoint
from vfl_client.serving_metrics import ServingMetrics
from vfl_client.serving_peers import GrpcPeer, parse_peer
from vfl_client.serving_servicer import ServingServicer
from vfl_core.errors import ConfigError
from vfl_core.serving.bundle import Bundle, load_bundle, read_bundle_meta
from vfl_core.serving.features import FeatureSource, FeatureTable, Watcher
from vfl_core.serving.gateway import DEFAULT_DEADLINE_S, DEFAULT_MAX_IDS, Gateway
from vfl_core.serving.lookup import LookupFeatures, import_lookup
from vfl_core.serving.peers import DEFAULT_WINDOW_S, BatchingPeer, PeerPort
from vfl_wire.channels import bind, make_server
from vfl_wire.security import OPERATOR, GuardInterceptor, Security, load_security
from vfl_wire.v1 import serving_pb2_grpc

log = logging.getLogger(__name__)

SERVING, NOT_SERVING = HealthCheckResponse.SERVING, HealthCheckResponse.NOT_SERVING
# how long the warm-up waits for the peers' first answers before the gateway is ready anyway
WARMUP_S = 5.0


class ServeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bundle: Path
    features: Path | None = None  # CSV/Parquet keyed by `id_column`
    lookup: str | None = None  # module:function giving the rows instead (vfl_core.serving.lookup)
    id_column: str | None = None
    party_id: str | None = None  # default: the bundle's
    listen: str = "127.0.0.1:0"
    http: str | None = None  # host:port of the JSON endpoint (gateway only)
    peers: tuple[str, ...] = ()  # BLOCK[:NAME]=HOST:PORT of the other serving parties
    # parties whose ServeEmbed calls are answered; None: a label party none, a feature party any
    embed_for: tuple[str, ...] | None = None
    deadline_ms: float = Field(DEFAULT_DEADLINE_S * 1000, gt=0, le=10_000)
    batch_window_ms: float = Field(DEFAULT_WINDOW_S * 1000, ge=0, le=1000)
    max_ids: int = Field(DEFAULT_MAX_IDS, ge=1, le=4096)
    secret: str = "vfl-demo-secret"
    device: str = "cpu"  # cpu | cuda[:N] (the command line's auto: cpu, the faster for small MLPs)
    threads: int = Field(1, ge=1)
    tls_dir: Path | None = Path("certs")
    insecure: bool = False
    token_file: Path | None = None
    # the HTTP endpoint's authentication (vfl_client.serving_auth) and request threads
    http_auth: AuthMode = "auto"
    http_token_file: Path | None = None
    http_clients: tuple[str, ...] = (OPERATOR,)
    http_workers: int = Field(DEFAULT_WORKERS, ge=1, le=1024)
    warmup_s: float = Field(WARMUP_S, gt=0, le=120)


def run_serving(config: ServeConfig, stop: threading.Event | None = None) -> str:
    """Serve until `stop` is set or SIGTERM/SIGINT arrives; returns why serving ended.

    The HTTP endpoint (a gateway's) opens first and says "loading", then "warming", then
    "ready" (vfl_client.serving_health); the gRPC health service says NOT_SERVING until ready."""
    torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    meta = read_bundle_meta(config.bundle)  # the role, before torch loads the models
    party_id = config.party_id or meta.party_id
    security = load_security(
        config.tls_dir, config.insecure, party_id, token_file=config.token_file
    )
    stop = stop or stop_on_signals()
    readiness = Readiness(party_id)
    with contextlib.ExitStack() as stack:
        metrics = None
        if config.http is not None:
            if not meta.has_head:
                raise ConfigError(f"party {party_id} has no head: only a label party is a gateway")
            metrics = ServingMetrics(lambda: _peer_health(readiness))
            readiness.listen(lambda ready: metrics.ready.set(1.0 if ready else 0.0))
            stack.callback(start_http(config, security, readiness, metrics).stop)
        bundle = load_bundle(config.bundle, device)
        features = _features(config, bundle)
        if isinstance(features, FeatureTable):
            stack.callback(Watcher(features).start().stop)
        gateway = readiness.gateway = _gateway(config, bundle, features, security, stack)
        servicer = ServingServicer(bundle, features, gateway, readiness, metrics)
        policy = ServingPolicy.of(party_id, bundle.meta.has_head, config.embed_for)
        server, port, health = _start_server(servicer, config.listen, security, policy)
        readiness.listen(lambda ready: health.set("", SERVING if ready else NOT_SERVING))
        stack.callback(lambda: server.stop(grace=1.0).wait())
        readiness.set(WARMING)
        _warm_up(bundle, gateway, config.warmup_s)
        readiness.set(READY)
        freeze_loaded_objects()
        role = "gateway" if gateway is not None else "party"
        log.info(
            "party %s serves block %d as %s (port %d)", party_id, bundle.meta.block, role, port
        )
        stop.wait()
    return "stopped by a signal"


def start_http(
    config: ServeConfig, security: Security, readiness: Readiness, metrics: ServingMetrics
) -> HttpEndpoint:
    """The gateway's HTTP endpoint, with the authentication --http-auth resolves to."""
    assert config.http is not None
    host = config.http.rpartition(":")[0].strip("[]")
    party_id = readiness.party
    token_file = config.http_token_file or token_file_default(config.tls_dir, party_id)
    if config.http_auth == "token" and token_file is None:
        raise ConfigError(
            f"--http-auth token: no http-tokens.json for {party_id} in {config.tls_dir} "
            "(`vfl certs --http-callers`): give --http-token-file"
        )
    mode = resolve_mode(config.http_auth, host, security.identity is not None, token_file)
    guard = ConnectionGuard()
    tls = None
    if mode == "mtls" or (mode != "none" and security.identity is not None):
        identity = security.identity
        assert identity is not None
        tls = (identity.directory / "cert.pem", identity.directory / "key.pem",
               identity.directory / "ca.pem")  # fmt: skip
    digests = read_token_digests(token_file) if mode == "token" and token_file else ()
    authorizer = Authorizer(
        mode, digests=digests, names=config.http_clients, peer_name=guard.names.get
    )
    app = ServingApp(readiness, metrics, authorizer, config.http_workers)
    log.info("HTTP authentication: %s", mode)
    return HttpEndpoint(config.http, app, tls, guard).start()


def _peer_health(readiness: Readiness) -> dict[str, dict[str, object]]:
    return {} if readiness.gateway is None else readiness.gateway.peer_health()


def _warm_up(bundle: Bundle, gateway: Gateway | None, timeout_s: float) -> None:
    """The models' first calls (and at a gateway, each peer asked once) before ready."""
    if gateway is not None:
        gateway.warm_up(timeout_s)
        return
    import numpy as np

    bundle.embed(np.zeros((1, *bundle.meta.feature_shape), dtype=np.float32))


def freeze_loaded_objects() -> None:
    """Leave everything loaded so far (torch, the bundle, the table) out of garbage collection.

    Measured at 64 callers: a full collection of the gateway process scanned every object torch
    and the bundle made at start, and paused every request in flight for 80-88 ms (twice in 6 s
    of load, 1.7% of the requests each time); frozen, a full collection scans only what was made
    since. Called once the party is ready: what it allocates while serving is collected as usual."""
    gc.collect()
    gc.freeze()


def _features(config: ServeConfig, bundle: Bundle) -> FeatureSource | None:
    if config.features is None and config.lookup is None:
        return None
    given = "--lookup" if config.lookup is not None else f"--features {config.features}"
    if config.features is not None and config.lookup is not None:
        raise ConfigError("--data and --lookup: give one source of the party's rows")
    if bundle.preprocessing is None:
        raise ConfigError(
            f"{given}: the bundle's party was not trained on a table (no fitted "
            "preprocessing), so rows cannot be served for it"
        )
    if config.lookup is not None:
        function = import_lookup(config.lookup)
        return LookupFeatures(function, bundle.preprocessing, config.lookup)
    if config.id_column is None:
        raise ConfigError("--features needs --id-column (the table's ID column)")
    return FeatureTable(
        config.features,
        config.id_column,
        bundle.preprocessing,
        config.secret.encode(),
        label_party=bundle.meta.has_head,
    )


def _gateway(
    config: ServeConfig,
    bundle: Bundle,
    features: FeatureSource | None,
    security: Security,
    stack: contextlib.ExitStack,
) -> Gateway | None:
    """The gateway of a label party (with its peers), else None (a feature party)."""
    if not bundle.meta.has_head:
        if config.peers or config.http:
            raise ConfigError(
                f"party {bundle.meta.party_id} has no head: only a label party is a gateway "
                "(--peer, --http)"
            )
        return None
    peers: list[PeerPort] = []
    for text in config.peers:
        block, name, address = parse_peer(text)
        grpc_peer = GrpcPeer(name, block, address, security, bundle.meta.embed_dim)
        stack.callback(grpc_peer.close)
        if config.batch_window_ms > 0:
            batching = BatchingPeer(grpc_peer, config.batch_window_ms / 1000)
            stack.callback(batching.close)
            peers.append(batching)
        else:
            peers.append(grpc_peer)
    blocks = [p.block for p in peers] + [bundle.meta.block]
    if len(set(blocks)) != len(blocks):
        raise ConfigError(f"--peer: blocks {sorted(blocks)} repeat a block")
    return Gateway(
        bundle,
        features,
        peers,
        config.secret.encode(),
        deadline_s=config.deadline_ms / 1000,
        max_ids=config.max_ids,
    )


def _start_server(
    servicer: ServingServicer, listen: str, security: Security, policy: ServingPolicy
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """The gRPC server, started, with its health service NOT_SERVING (until ready)."""
    guard = GuardInterceptor(
        secure=security.secure,
        policy=policy,
        max_inflight=MAX_INFLIGHT_PER_PEER,
        readers=MAX_CONCURRENT_RPCS,
    )
    server = make_server(
        8, [guard], max_concurrent_rpcs=MAX_CONCURRENT_RPCS, max_receive_bytes=MAX_REQUEST_BYTES
    )
    serving_pb2_grpc.add_ServingServicer_to_server(servicer, server)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    checker.set("", NOT_SERVING)
    port = bind(server, listen, security.server_credentials())
    server.start()
    return server, port, checker
