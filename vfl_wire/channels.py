"""gRPC server and channel factories with the federation's options (see NOTES-grpc.md).

Message cap: the largest message we plan for is a Fuse request or reply carrying K - 1
embeddings or gradients of 4096 x 1024 float32 (16 MiB each). 128 MiB fits seven of them (K = 8)
plus framing. It is an explicit cap on purpose: the 4 MiB default refuses a single embedding,
and an unbounded one would let one party exhaust another's memory. Both directions, both sides.

Keepalive: the defaults never notice a frozen peer or a cut link; with keepalive 5 s, ping
timeout 3 s a dead connection surfaces as UNAVAILABLE within about 8 s even between calls. The
server accepts pings every second with unlimited strikes because we own both ends.
Reconnect backoff is capped at 1 s so a restarted peer is reachable again almost at once.

Connections: anyone who reaches a port can open TCP connections before any TLS or token check,
and each one holds a file descriptor. A connection must finish its TLS and HTTP/2 handshake
within 10 s (grpc's default is 120 s), and a server lifts the process's soft limit on open files
to its hard limit (Docker's default soft limit, 1024, let ~1000 idle connections keep the parties
out until they closed). A connection holds at most MAX_STREAMS_PER_CONNECTION streams at once.

Compression: none, either way. grpc inflates a compressed message up to the size cap, so 15 KiB
of gzip made a coordinator build a 15 MiB request (four raw
connections sending such requests: 4.6 CPU s in 8 s and +600 MB resident that stayed). Nothing
of ours compresses (float tensors hardly shrink; `--wire-dtype` does that job), so a compressed
request is refused (UNIMPLEMENTED, "... is disabled") and a compressed reply fails its call
(INTERNAL), before inflating.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import resource
import socket
import ssl
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from vfl_core.errors import VflError

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 128 * 1024 * 1024
HANDSHAKE_TIMEOUT_MS = 10_000  # a WAN TLS handshake takes a few round trips, not seconds
# HTTP/2 streams one connection may hold open; a client queues calls beyond it (never an error).
# Any limit also turns on grpc's defence against rapid reset (streams opened and cancelled at
# once, CVE-2023-44487): without one, a single plaintext attacker made every legitimate call
# fail with CANCELLED while it sent, and the server spent both cores on the Python side. Not
# lower: a refused request's stream is released a little after its answer, and a connection
# sending malformed requests back to back (tests/test_fuzz.py) was refused new streams
# (REFUSED_STREAM, UNAVAILABLE) under limits of 4 to 64; training traffic was not, even at 4.
MAX_STREAMS_PER_CONNECTION = 256
FEW_OPEN_FILES = 4096  # below this, a server warns: a few thousand connections shut it

Options = list[tuple[str, int]]


class BindError(VflError):
    """A server could not listen on the requested address (taken, not local, malformed)."""


def _common_options() -> Options:
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 5000),
        ("grpc.keepalive_timeout_ms", 3000),
        ("grpc.http2.ping_timeout_ms", 3000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # identity only: a compressed message is refused, never inflated (module docstring)
        ("grpc.compression_enabled_algorithms_bitset", 1),
    ]


def server_options(handshake_timeout_ms: int = HANDSHAKE_TIMEOUT_MS) -> Options:
    return [
        *_common_options(),
        ("grpc.server_handshake_timeout_ms", handshake_timeout_ms),
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        # A peer pinging more often than once a second while the server sends it nothing gets
        # a GOAWAY (too_many_pings) at its third such ping: every ping is answered, and a flood
        # of them (0 strikes: unlimited) kept a core busy for as long as it went on. Ours ping
        # every keepalive_time_ms, and a server that sends data clears the strikes.
        ("grpc.http2.min_ping_interval_without_data_ms", 1000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.so_reuseport", 0),  # the default 1 lets a second server silently share the port
    ]


def channel_options() -> Options:
    return [
        *_common_options(),
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]


def freeze_heap() -> None:
    """Hide every object alive now (modules, torch, the data) from the garbage collector, once a
    server process has started. grpc turns a request's headers into Python tuples before any code
    of ours runs, and a header block of 160,000 tiny entries (640 KB, or a quarter of that through
    HPACK's table) then cost the coordinator 0.28 CPU s, most of it collections walking torch's
    objects; frozen, 0.14 s (README, "Header floods"). Call it from a server's process only: what
    it hides is never collected."""
    gc.collect()
    gc.freeze()


def make_server(
    max_workers: int,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    *,
    max_concurrent_rpcs: int | None = None,
    max_receive_bytes: int = MAX_MESSAGE_BYTES,
    handshake_timeout_ms: int = HANDSHAKE_TIMEOUT_MS,
) -> grpc.Server:
    """A sync server with our options; add servicers, then `bind`, then `start`.

    `max_concurrent_rpcs` bounds the calls accepted at once; beyond it grpc answers
    RESOURCE_EXHAUSTED. Every accepted call gets a worker at once (the pool grows to
    `max_concurrent_rpcs` threads as needed): a call that waits, for a slow body or a long
    evaluation, never keeps another waiting for a thread. `max_receive_bytes` caps one request.
    A connection that has not finished its handshake after `handshake_timeout_ms` is closed.
    """
    raise_open_file_limit()
    options = [
        (k, max_receive_bytes if k == "grpc.max_receive_message_length" else v)
        for k, v in server_options(handshake_timeout_ms)
    ]
    workers = max(max_workers, max_concurrent_rpcs or 0)  # threads start lazily, as needed
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vfl-grpc"),
        interceptors=list(interceptors),
        options=options,
        maximum_concurrent_rpcs=max_concurrent_rpcs,
    )


def raise_open_file_limit() -> int:
    """Lift this process's soft limit on open files to its hard limit; return the soft limit now
    in force. Every accepted connection is a file, so the soft limit is how many connections it
    takes to keep everyone else out; the hard limit is the operator's to set (`ulimit -Hn`,
    compose `ulimits`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # the kernel refuses an unlimited soft limit for files; 2**20 is Linux's default nr_open
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as err:
            logger.debug("open-file limit stays %d: %s", soft, err)
    if soft != resource.RLIM_INFINITY and soft < FEW_OPEN_FILES:
        logger.warning(
            "this process may hold only %d open files: about as many connections from anyone "
            "who reaches its port would keep the federation out; raise the hard limit "
            "(ulimit -Hn, or ulimits.nofile in compose) to at least %d",
            soft,
            FEW_OPEN_FILES,
        )
    return soft


def bind(
    server: grpc.Server,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
) -> int:
    """Listen on `address` ("host:port"; port 0 picks a free one) and return the bound port.

    Raises BindError if the address cannot be bound, e.g. when the port is taken, with the
    reason grpc's C core gives (it writes it to the process's stderr, where it would come as a
    raw `add_port.cc` line before our error: it is read from there instead).
    """
    with _stderr_read() as lines:
        try:
            if credentials is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, credentials)
        except RuntimeError:  # grpcio raises RuntimeError("Failed to bind to address ...")
            port = 0
    reason = next((m.group(1) for m in map(_BIND_REASON.search, lines) if m), None)
    for line in lines:  # anything else written meanwhile (another thread's log) goes on
        if "add_port.cc" not in line:
            sys.stderr.write(line + "\n")
    if port == 0:  # older grpcio reported failure as port 0
        raise BindError(
            f"cannot listen on {address} (--listen): {reason or 'port taken or address invalid'}"
            "; stop the process that holds it, or give --listen another address (port 0 picks "
            "a free one)"
        )
    logger.info("listening on %s (port %d)", address, port)
    return port


# grpc's reason in its add_port.cc line: "(Error in bind for address '...': Address already in use)"
_BIND_REASON = re.compile(r"Error in bind for address '[^']*': ([^)]*)\)")


@contextlib.contextmanager
def _stderr_read() -> Iterator[list[str]]:
    """Send what is written to file descriptor 2 (the C core's log) to a temporary file while
    the block runs; yields a list that holds its lines once the block is done."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines += caught.read().decode("utf-8", "replace").splitlines()


def start_with_health(
    server: grpc.Server, address: str, credentials: grpc.ServerCredentials | None = None
) -> int:
    """Add the gRPC health service to `server` (what `vfl health` and container checks ask),
    `bind` it to `address`, start it and report it SERVING; returns the bound port."""
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = bind(server, address, credentials)
    server.start()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    return port


def make_channel(
    address: str,
    credentials: grpc.ChannelCredentials | None = None,
    target_name: str | None = None,
    service_config: str | None = None,
) -> grpc.Channel:
    """A channel to `address` with our options; insecure unless `credentials` are given.

    `target_name`: the name the server's certificate must carry, whatever `address` says (our
    certificates carry their identity, e.g. "coordinator" or "party0"; see vfl_wire.security).
    `service_config`: gRPC's JSON service config, e.g. each method's largest reply
    (vfl_wire.reply_limits); the channel's own limits still apply above it.
    """
    options: list[tuple[str, int | str]] = [*channel_options()]
    if service_config is not None:
        options.append(("grpc.service_config", service_config))
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    if target_name is not None:
        options.append(("grpc.ssl_target_name_override", target_name))
    return grpc.secure_channel(address, credentials, options=options)


def speaks_tls(address: str, timeout: float = 2.0) -> bool:
    """Whether the server at `address` ("host:port") answers a TLS handshake. A plaintext client
    of a TLS server only ever sees "Socket closed": this tells that apart from a server that is
    down. The probe sends no certificate, so a mutual-TLS server refuses it, with a TLS alert."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw,
            context.wrap_socket(raw, do_handshake_on_connect=False) as tls,
        ):
            tls.do_handshake()
            tls.recv(1)  # TLS 1.3: the server judges the (missing) certificate after this
    except ssl.SSLEOFError:
        return False
    except ssl.SSLError as err:
        return "ALERT" in (err.reason or "").upper()  # the server spoke TLS, then refused us
    except (OSError, ValueError):
        return False
    return True


def plaintext_to_tls_hint(address: str, err: grpc.RpcError) -> str | None:
    """For a failed plaintext (--insecure) call: why, if the server speaks TLS, else None."""
    if err.code() != grpc.StatusCode.UNAVAILABLE or not speaks_tls(address):
        return None
    return (
        f"the server at {address} speaks TLS but this process runs --insecure (plaintext): give "
        "it its `vfl certs` directory with --tls-dir instead of --insecure"
    )
