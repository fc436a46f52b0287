"""Who may ask the gateway's HTTP endpoint for predictions (--http-auth).

- `mtls`: HTTPS with the party's `vfl certs` identity; a caller must present a certificate of
  the federation's CA whose name is one of `--http-client` (default: `operator`, the identity
  `vfl certs` writes for the application). Probes and scrapers without one still reach /health/*
  and /metrics (the handshake asks for a certificate but does not require one).
- `token`: `Authorization: Bearer TOKEN`, compared by SHA-256 digest in constant time with the
  digests `vfl certs` wrote in the party's directory (`http-tokens.json`: one per HTTP caller,
  whose tokens are `<caller>/http-token`; the gateway holds no token), or with the tokens of
  `--http-token-file` (one a line) when given.
- `none`: anyone who reaches the port.
- `auto` (the default): `none` on a loopback address (only this host reaches it), else `mtls`
  when the party has a TLS identity (--tls-dir), else refused at start: a gateway reachable
  from elsewhere answers any customer's prediction to whoever connects.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal

from vfl_core.errors import ConfigError
from vfl_wire.security import HTTP_TOKENS_FILE, OPERATOR, identity_dir, load_token_digests

AuthMode = Literal["auto", "none", "token", "mtls"]


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_mode(mode: AuthMode, host: str, has_identity: bool, token_file: Path | None) -> str:
    """The mode `auto` stands for here (any other is returned as given, checked)."""
    if mode == "mtls" and not has_identity:
        raise ConfigError("--http-auth mtls needs the party's TLS identity (--tls-dir)")
    if mode != "auto":
        return mode
    if is_loopback(host):
        return "none"
    if has_identity:
        return "mtls"
    if token_file is not None:
        return "token"
    raise ConfigError(
        f"--http {host}: reachable beyond this host, and with --insecure there is no TLS "
        "identity for mutual TLS: give --http-auth token (a bearer token from --http-token-file), "
        "or --http-auth none to serve predictions to anyone who connects"
    )


def token_file_default(tls_dir: Path | None, party_id: str) -> Path | None:
    """The party's `http-tokens.json` from `vfl certs`, when there is one."""
    if tls_dir is None:
        return None
    path = identity_dir(tls_dir, party_id) / HTTP_TOKENS_FILE
    return path if path.is_file() else None


def read_token_digests(path: Path) -> frozenset[bytes]:
    """SHA-256 digests of the accepted tokens: a `vfl certs` http-tokens.json (caller -> hex
    digest), or any other file as tokens, one a line."""
    if path.suffix == ".json":
        digests = load_token_digests(path).values()
        if not digests:
            raise ConfigError(f"{path}: no caller's token digest in it (vfl certs --http-callers)")
        return frozenset(bytes.fromhex(d) for d in digests)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise ConfigError(f"--http-token-file {path}: unreadable ({err.strerror})") from None
    digests = frozenset(hashlib.sha256(t.strip()).digest() for t in lines if t.strip())
    if not digests:
        raise ConfigError(f"--http-token-file {path}: no token in it")
    return digests


class Authorizer:
    """Says why a request is refused (None: allowed). `peer_name(client)`: the certificate name
    the caller at `client` (host, port) presented, under mutual TLS."""

    def __init__(
        self,
        mode: str,
        *,
        digests: Collection[bytes] = (),
        names: Collection[str] = (OPERATOR,),
        peer_name: Callable[[Any], str | None] = lambda client: None,
    ) -> None:
        self.mode = mode
        self._digests = tuple(digests)
        self._names = frozenset(names)
        self._peer_name = peer_name

    def refusal(self, scope: dict[str, Any]) -> str | None:
        if self.mode == "none":
            return None
        if self.mode == "mtls":
            client = scope.get("client")
            name = self._peer_name(tuple(client) if client else None)
            if name in self._names:
                return None
            shown = "no client certificate" if name is None else f"certificate {name!r}"
            allowed = ", ".join(sorted(self._names))
            return f"unauthenticated: {shown}; give the certificate of {allowed}"
        return self._token_refusal(scope)

    def _token_refusal(self, scope: dict[str, Any]) -> str | None:
        given = dict(scope.get("headers", ())).get(b"authorization", b"")
        scheme, _, token = given.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return "unauthenticated: give Authorization: Bearer TOKEN"
        digest = hashlib.sha256(token.strip()).digest()
        # every digest compared, in constant time each: the time says nothing of which matched
        if any([hmac.compare_digest(digest, d) for d in self._digests]):
            return None
        return "unauthenticated: the bearer token is not one this gateway accepts"
