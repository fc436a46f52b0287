"""TLS, mutual TLS, party authentication and per-peer limits, for both servers and every channel.

Identities. `vfl certs` (vfl_cli/certs_cmd.py) makes a federation CA and one key + certificate per
identity: the coordinator, each party (its party id) and an operator (for `vfl evaluate` and
`vfl predict`). A certificate's common name is the identity, and its DNS names include it, so a
channel checks the peer it reaches by name (`grpc.ssl_target_name_override`), whatever address it
dials. Layout (`--tls-dir certs/` with `--party-id party0`, or `--tls-dir certs/party0`):

    certs/ca.pem, certs/ca.key           the CA (keep ca.key offline; no process needs it)
    certs/<name>/ca.pem, cert.pem, key.pem
    certs/<name>/token                   the second factor of a party or the operator
    certs/coordinator/tokens.json        SHA-256 of every token, by identity
    certs/<caller>/http-token            a caller's bearer token for a gateway's HTTP endpoint
    certs/<party>/http-tokens.json       SHA-256 of every HTTP caller's token, by caller

Servers. Every call is checked by `GuardInterceptor` before any servicer sees it: the peer's
certificate (mutual TLS: the server refuses a client without a certificate of the CA), the calls
its identity may make (`Policy`), its token (`authorization: Bearer`, compared in constant time on
SHA-256 digests), a cap on its calls in flight, and a request that does not parse. The servicer
then reads the authenticated identity with `current_peer()` and binds it to the message (a party
registers only under the name in its certificate).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID
from google.protobuf.message import DecodeError

from vfl_core.errors import ConfigError
from vfl_wire.log_budget import budget

# peers cause its warnings, one per refused request: a flood must not fill the disk
log = budget(logging.getLogger(__name__))

COORDINATOR = "coordinator"
OPERATOR = "operator"
TOKEN_FILE = "token"
TOKENS_FILE = "tokens.json"
HTTP_TOKEN_FILE = "http-token"  # a gateway HTTP caller's bearer token (not its gRPC token)
HTTP_TOKENS_FILE = "http-tokens.json"  # in each party's directory: caller -> SHA-256 hex
BLOCKS_FILE = "blocks.json"  # in the coordinator's directory: party id -> the blocks it may hold
HEALTH_SERVICE = "grpc.health.v1.Health"
PARTY_SERVICE = "vfl.v1.Party"
COORDINATOR_SERVICE = "vfl.v1.Coordinator"
DATA_PLANE_SERVICE = "vfl.v1.DataPlane"
DEFAULT_MAX_INFLIGHT = 8  # calls in flight per peer identity (per connection when insecure)
BODY_TIMEOUT_S = 30.0  # a request body must arrive in full this soon after its headers

_PEER: contextvars.ContextVar[str | None] = contextvars.ContextVar("vfl_peer", default=None)


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """One identity's key material, read from a `vfl certs` directory."""

    name: str
    directory: Path
    ca: bytes
    cert: bytes
    key: bytes
    token: bytes | None = None


def identity_dir(tls_dir: Path, name: str | None) -> Path:
    """`tls_dir/<name>` when it holds a certificate (the `vfl certs` root), else `tls_dir`."""
    tls_dir = Path(tls_dir)
    if name and (tls_dir / name / "cert.pem").is_file():
        return tls_dir / name
    return tls_dir


def load_identity(
    tls_dir: Path, name: str | None, *, token_file: Path | None = None, need_token: bool = False
) -> Identity:
    """Read ca.pem, cert.pem, key.pem (and the token) of `name`; ConfigError with a hint."""
    directory = identity_dir(tls_dir, name)
    files = {f: directory / f"{f}.pem" for f in ("ca", "cert", "key")}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise ConfigError(
            f"no TLS material for {name or 'this process'} in {tls_dir} (missing "
            f"{', '.join(missing)}); create it with `vfl certs` or pass --insecure"
        )
    blobs = {f: _read(p) for f, p in files.items()}
    cn = certificate_name(blobs["cert"], files["cert"])
    if name and cn != name:
        raise ConfigError(f"{files['cert']} is the certificate of {cn!r}, not of {name!r}")
    token = None
    token_path = Path(token_file) if token_file is not None else directory / TOKEN_FILE
    if token_file is not None or need_token:
        if not token_path.is_file():
            raise ConfigError(f"no token file {token_path} for {cn} (written by `vfl certs`)")
        token = _read(token_path).strip()
        if not token:
            raise ConfigError(f"token file {token_path} is empty")
    return Identity(cn, directory, blobs["ca"], blobs["cert"], blobs["key"], token)


def certificate_name(pem: bytes, where: Path | str = "certificate") -> str:
    """The common name of a PEM certificate."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except ValueError as err:
        raise ConfigError(f"{where}: not a PEM certificate ({err})") from None
    if not names:
        raise ConfigError(f"{where}: certificate without a common name")
    value = names[0].value
    return value.decode() if isinstance(value, bytes) else value


def token_digest(token: bytes | str) -> str:
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw.strip()).hexdigest()


def load_token_digests(path: Path) -> dict[str, str]:
    """identity -> SHA-256 hex of its token, from the coordinator's tokens.json."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read token digests {path}: {err}") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in data.items()
    ):
        raise ConfigError(f"{path}: expected a mapping of identity to SHA-256 hex digest")
    return dict(data)


def _read(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except PermissionError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}{_owner_hint(path)}") from None
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from None


def _owner_hint(path: Path) -> str:
    """Why a key may be unreadable here: `vfl certs` writes keys and tokens readable by their
    owner only, and in a container this process may run as another uid (compose: VFL_UID)."""
    try:
        owner = Path(path).stat().st_uid
    except OSError:
        return ""
    me = os.getuid()
    if owner == me:
        return ""
    return (
        f" (owned by uid {owner}, readable by its owner only; this process runs as uid {me}: "
        f"with docker compose, set VFL_UID/VFL_GID to the owner's ids, as `vfl compose` writes "
        "them to .env, and rebuild the image)"
    )


# ---------------------------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------------------------


def server_credentials(identity: Identity) -> grpc.ServerCredentials:
    """Mutual TLS: the server presents its certificate and requires one of the CA from clients."""
    return grpc.ssl_server_credentials(
        [(identity.key, identity.cert)], root_certificates=identity.ca, require_client_auth=True
    )


def channel_credentials(identity: Identity) -> grpc.ChannelCredentials:
    """The identity's certificate for the peer to check, the CA to check the peer with, and its
    token (if it has one) on every call."""
    ssl = grpc.ssl_channel_credentials(identity.ca, identity.key, identity.cert)
    if identity.token is None:
        return ssl
    token = grpc.access_token_call_credentials(identity.token.decode())
    return grpc.composite_channel_credentials(ssl, token)


@dataclass(frozen=True)
class Security:
    """How one process talks: plaintext (identity None, only with --insecure) or mutual TLS as
    `identity`. Servers get credentials and a guard; channels check the peer's name."""

    identity: Identity | None = None

    @property
    def secure(self) -> bool:
        return self.identity is not None

    @property
    def name(self) -> str | None:
        return None if self.identity is None else self.identity.name

    def server_credentials(self) -> grpc.ServerCredentials | None:
        return None if self.identity is None else server_credentials(self.identity)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        return None if self.identity is None else channel_credentials(self.identity)

    def target_name(self, peer: str) -> str | None:
        """The name the peer's certificate must carry (None: plaintext, nothing to check)."""
        return None if self.identity is None else peer

    def channel(self, address: str, peer: str) -> grpc.Channel:
        """A channel to `address` that accepts only the certificate of `peer`."""
        from vfl_wire.channels import make_channel

        return make_channel(address, self.channel_credentials(), self.target_name(peer))


def load_security(
    tls_dir: Path | None,
    insecure: bool,
    name: str | None,
    *,
    token_file: Path | None = None,
    need_token: bool = False,
) -> Security:
    """The security of a process from its command line: --insecure, or --tls-dir (+ identity)."""
    if insecure:
        log.warning(
            "plaintext gRPC (--insecure): anyone who can reach these ports can read the traffic "
            "and act as a party; use it only on a trusted host or network"
        )
        return Security(None)
    if tls_dir is None:
        raise ConfigError("no --tls-dir: create certificates with `vfl certs` or pass --insecure")
    identity = load_identity(tls_dir, name, token_file=token_file, need_token=need_token)
    log.info("mutual TLS as %s (certificates in %s)", identity.name, identity.directory)
    return Security(identity)


# ---------------------------------------------------------------------------------------------
# Server side
# ---------------------------------------------------------------------------------------------


def current_peer() -> str | None:
    """The authenticated identity of the call being served (None on a plaintext server)."""
    return _PEER.get()


def peer_identity(context: grpc.ServicerContext) -> str | None:
    """The common name of the client certificate, if the call came over mutual TLS."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names else None


Policy = Callable[[str, str, str], str | None]  # (identity, service, rpc) -> refusal or None


def coordinator_policy(parties: Mapping[str, object]) -> Policy:
    """Parties may register and ask the status; the operator may ask status, evaluate, predict;
    any holder of a federation certificate may ask the health service."""

    def allow(peer: str, service: str, rpc: str) -> str | None:
        if service == HEALTH_SERVICE:
            return None
        if service == COORDINATOR_SERVICE:
            if peer == OPERATOR and rpc in ("Status", "Evaluate", "Predict"):
                return None
            if peer in parties and rpc in ("Register", "Status"):
                return None
            if peer not in parties and peer != OPERATOR:
                return f"{peer!r} is not a party of this federation"
        return f"{peer!r} may not call {service}/{rpc}"

    return allow


def party_policy(peer: str, service: str, rpc: str) -> str | None:
    """A party serves the coordinator, the other parties on the direct data plane (which
    checks the block a caller claims, vfl_client.data_plane), and the health service to any
    certificate holder."""
    if service == HEALTH_SERVICE or (service == PARTY_SERVICE and peer == COORDINATOR):
        return None
    if service == DATA_PLANE_SERVICE and peer not in (COORDINATOR, OPERATOR):
        return None
    return f"{peer!r} may not call {service}/{rpc}: parties answer only the coordinator"


class InflightLimiter:
    """At most `limit` calls in flight per peer; the next is refused at once."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ConfigError(f"the in-flight limit must be at least 1, not {limit}")
        self.limit = limit
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def slot(self, peer: str) -> Iterator[bool]:
        with self._lock:
            taken = self._counts.get(peer, 0) < self.limit
            if taken:
                self._counts[peer] = self._counts.get(peer, 0) + 1
        try:
            yield taken
        finally:
            if taken:
                with self._lock:
                    self._counts[peer] -= 1
                    if not self._counts[peer]:
                        del self._counts[peer]


class GuardInterceptor(grpc.ServerInterceptor):
    """Authenticate, authorise, rate-limit and parse every unary call before the servicer.

    secure: the server runs mutual TLS and every call must come with a certificate identity.
    tokens: identity -> SHA-256 hex of its token; None = no second factor checked here.
    refuse: calls this server never answers, with the reason (FAILED_PRECONDITION, either mode).
    A request that does not parse is refused with INVALID_ARGUMENT (grpc would say INTERNAL).

    Slow bodies (slowloris). grpc's sync server gives a unary call a worker thread that first
    waits for the whole request body, so a peer that sends headers and part of a body ties up a
    worker for good (16 such streams stopped the coordinator). This guard serves every unary
    method as request-streaming instead: its worker starts at once, authenticates, authorises
    and takes the peer's in-flight slot from the headers alone, and only then reads the body,
    for at most `body_timeout_s` (on a reader thread, so the wait is bounded). A peer without a
    certificate, token or right is refused before any of its body is read; one with them holds
    at most `max_inflight` calls, each for at most `body_timeout_s`.
    """

    def __init__(
        self,
        *,
        secure: bool,
        policy: Policy | None = None,
        tokens: Mapping[str, str] | None = None,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        refuse: Mapping[str, str] | None = None,
        body_timeout_s: float = BODY_TIMEOUT_S,
        readers: int = 64,  # bodies read at once: the server's maximum_concurrent_rpcs
    ) -> None:
        self.secure = secure
        self.policy = policy
        self.refuse = dict(refuse or {})  # rpc -> why this server never answers it
        self.tokens = dict(tokens) if tokens is not None else None
        self.limiter = InflightLimiter(max_inflight)
        self.body_timeout_s = body_timeout_s
        self._readers = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="vfl-body")
        self._handlers: dict[str | bytes, grpc.RpcMethodHandler] = {}  # method -> guarded one
        self._lock = threading.Lock()

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        guarded = self._handlers.get(method)  # built once per method: this runs on every call
        if guarded is not None:
            return guarded
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # unknown method (UNIMPLEMENTED) or streaming (health Watch)
        name = method.decode() if isinstance(method, bytes) else method
        service, _, rpc = name.strip("/").partition("/")
        guarded = grpc.stream_unary_rpc_method_handler(  # the worker starts before the body is in
            self._guarded(service, rpc, handler),
            request_deserializer=None,  # parsed in _guarded, so a bad message gets a clear code
            response_serializer=handler.response_serializer,
        )
        with self._lock:
            return self._handlers.setdefault(method, guarded)

    def _guarded(self, service: str, rpc: str, handler: grpc.RpcMethodHandler) -> Callable:
        def guarded(requests: Iterator[bytes], context: grpc.ServicerContext):
            peer = self._authenticate(context, service, rpc)
            if rpc in self.refuse:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{rpc}: {self.refuse[rpc]}")
            with self.limiter.slot(_slot_key(peer, service)) as admitted:
                if not admitted:
                    context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"{rpc}: {self.limiter.limit} calls of {peer} already in flight",
                    )
                raw = self._read_body(requests, rpc, peer, context)
                request = _parse(handler, raw, rpc, context)
                reset = _PEER.set(peer if self.secure else None)
                try:
                    return handler.unary_unary(request, context)
                finally:
                    _PEER.reset(reset)

        return guarded

    def _read_body(
        self, requests: Iterator[bytes], rpc: str, peer: str, context: grpc.ServicerContext
    ) -> bytes:
        """The one request message, once it has arrived in full; refused if it takes longer
        than body_timeout_s (the reader thread is freed when the call ends)."""
        pending = self._readers.submit(next, requests, None)
        try:
            raw = pending.result(timeout=self.body_timeout_s)
        except FutureTimeout:
            log.warning(
                "%s from %s: request body not received in %.0fs", rpc, peer, self.body_timeout_s
            )
            context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{rpc}: request body not received within {self.body_timeout_s:g}s",
            )
        except grpc.RpcError:  # the caller went away
            context.abort(grpc.StatusCode.CANCELLED, f"{rpc}: cancelled before its request")
        if raw is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{rpc}: no request message")
        return raw

    def _authenticate(self, context: grpc.ServicerContext, service: str, rpc: str) -> str:
        if not self.secure:
            return context.peer()  # per connection: plaintext peers have no identity
        peer = peer_identity(context)
        if peer is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{rpc}: no client certificate")
        assert peer is not None
        if self.tokens is not None and service != HEALTH_SERVICE:  # authenticate, then authorise
            self._check_token(context, peer, rpc)
        if self.policy is not None:
            refusal = self.policy(peer, service, rpc)
            if refusal is not None:
                log.warning("refused %s/%s from %s: %s", service, rpc, peer, refusal)
                context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
        return peer

    def _check_token(self, context: grpc.ServicerContext, peer: str, rpc: str) -> None:
        expected = self.tokens.get(peer) if self.tokens is not None else None
        presented = _bearer(context.invocation_metadata())
        ok = (
            expected is not None
            and presented is not None
            and hmac.compare_digest(token_digest(presented), expected)
        )
        if not ok:
            log.warning("refused %s from %s: bad or missing token", rpc, peer)
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED, f"{rpc}: bad or missing token for {peer}"
            )


def _slot_key(peer: str, service: str) -> str:
    """Whose in-flight slots a call takes. Health checks are answered without the token, so a
    process holding only a party's certificate could otherwise take all of that party's slots
    with stalled checks and keep the real party from registering: they count apart, bounded by
    the same limit."""
    return f"{peer} (health checks)" if service == HEALTH_SERVICE else peer


def _bearer(metadata) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            return token if scheme.lower() == "bearer" and token else None
    return None


def _parse(handler: grpc.RpcMethodHandler, raw: bytes, rpc: str, context: grpc.ServicerContext):
    deserialize = handler.request_deserializer
    if deserialize is None:
        return raw
    try:
        return deserialize(raw)
    except (DecodeError, ValueError, RuntimeError) as err:
        log.warning("%s: malformed request of %d bytes: %s", rpc, len(raw), err)
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{rpc}: malformed request ({len(raw)} B)")
