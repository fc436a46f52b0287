"""`vfl certs`: a federation CA, a key + certificate per identity, and the parties' tokens.

    vfl certs --out certs --parties party0,party1,party2,party3 [--hosts vfl.example.org,10.0.0.5]

writes the layout of vfl_wire/security.py. Keys are ECDSA P-256; certificates carry the identity
as common name and DNS name (our channels check that name), plus localhost, 127.0.0.1, ::1, the
identity's docker-compose service name (coordinator, clientN for partyN) and --hosts. Running it
again over an existing directory reuses the CA and adds only the identities that are missing
(--force rewrites them), so it is safe as a one-shot container step.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vfl_cli.errors import user_errors
from vfl_core.errors import ConfigError

if TYPE_CHECKING:  # imported where used, not for --help
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec


log = logging.getLogger(__name__)
Opt = typer.Option

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")  # a DNS label: usable as a certificate name
PARTY_NUMBER = re.compile(r"party(\d+)")
DEFAULT_DAYS = 825
OPERATOR_NAME = "operator"  # vfl_wire.security.OPERATOR, not imported here (fast --help)


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ConfigError(
            f"identity {name!r}: use letters, digits and '-' (at most 63, not starting with '-')"
        )
    return name


def parse_pins(text: str) -> dict[str, list[int] | None]:
    """`party0,party1,party2:5+6` -> {party0: None, party1: None, party2: [5, 6]}: the blocks a
    party names, or None for the default (its place in the list; see `_write_pins`). The same
    syntax as the coordinator's --parties, and names `vfl certs` accepts."""
    from vfl_coordinator.admission import parse_parties

    pins = parse_parties(text)
    for name, blocks in pins.items():
        if any(b < 0 for b in blocks or ()):
            raise ConfigError(f"--parties: {name!r}: a block is a non-negative integer")
    parse_names(",".join(pins))
    return pins


def parse_names(text: str, what: str = "--parties") -> list[str]:
    from vfl_wire.security import COORDINATOR, OPERATOR

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"{what}: no names given")
    for name in names:
        check_name(name)
        if name in (COORDINATOR, OPERATOR):
            raise ConfigError(f"{what}: {name!r} is reserved")
    if len(set(names)) != len(names):
        raise ConfigError(f"{what}: duplicated names in {text!r}")
    return names


# ---------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------


def create_federation(
    out: Path,
    parties: list[str],
    hosts: list[str] = (),  # type: ignore[assignment]
    *,
    days: int = DEFAULT_DAYS,
    force: bool = False,
    pins: Mapping[str, list[int] | None] | None = None,
    http_callers: list[str] = (OPERATOR_NAME,),  # type: ignore[assignment]
) -> list[str]:
    """Write (or complete) the federation's TLS directory; returns the identities written.
    `pins`: the blocks each party may hold (default: its place in `parties`), merged into
    coordinator/blocks.json, which the coordinator enforces unless told otherwise.
    `http_callers`: who gets a bearer token for a gateway's HTTP endpoint (`<caller>/http-token`);
    every party's directory gets their digests (`http-tokens.json`), never the tokens."""
    from vfl_wire.security import COORDINATOR, OPERATOR, TOKEN_FILE

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _load_or_create_ca(out, days)
    written = []
    for name in [COORDINATOR, *parties, OPERATOR]:
        directory = out / name
        if (directory / "cert.pem").is_file() and not force:
            continue
        _write_identity(directory, name, ca_key, ca_cert, hosts, days)
        if name != COORDINATOR:
            _write_secret(directory / TOKEN_FILE, secrets.token_urlsafe(32).encode() + b"\n")
        written.append(name)
    _write_token_digests(out)
    _write_http_tokens(out, parties, http_callers, force=force)
    _write_pins(out, pins if pins is not None else dict.fromkeys(parties))
    log.info("federation certificates in %s: wrote %s", out, ", ".join(written) or "nothing new")
    return written


def _load_or_create_ca(out: Path, days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key_path, cert_path = out / "ca.key", out / "ca.pem"
    if cert_path.is_file():
        if not key_path.is_file():
            raise ConfigError(f"{cert_path} exists without ca.key: cannot add identities to it")
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"{key_path}: not an EC key written by `vfl certs`")
        return key, x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vfl federation CA")])
    cert = (
        _builder(name, name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_secret(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def _write_identity(
    directory: Path,
    name: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    hosts: list[str],
    days: int,
) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(_san(name, hosts)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_secret(directory / "key.pem", _key_pem(key))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))


def compose_service(name: str) -> str | None:
    """The docker-compose.yml service of an identity: coordinator, or clientN for partyN."""
    from vfl_wire.security import COORDINATOR

    if name == COORDINATOR:
        return COORDINATOR
    match = PARTY_NUMBER.fullmatch(name)
    return f"client{match.group(1)}" if match else None


def _san(name: str, hosts: list[str]) -> list[x509.GeneralName]:
    from cryptography import x509

    dns = [name, "localhost", compose_service(name)]
    ips = ["127.0.0.1", "::1"]
    for host in hosts:
        try:
            ipaddress.ip_address(host)
            ips.append(host)
        except ValueError:
            dns.append(host)
    general: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys(dns) if d]
    general += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips)]
    return general


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    from cryptography import x509

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_secret(path: Path, data: bytes) -> None:
    """Create `path` readable by its owner only (keys, tokens)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_token_digests(out: Path) -> None:
    """coordinator/tokens.json: SHA-256 of every token under `out`, so the coordinator can check
    tokens without holding them."""
    from vfl_wire.security import COORDINATOR, TOKEN_FILE, TOKENS_FILE, token_digest

    digests = {
        p.parent.name: token_digest(p.read_bytes())
        for p in sorted(out.glob(f"*/{TOKEN_FILE}"))
        if p.parent.name != COORDINATOR
    }
    (out / COORDINATOR / TOKENS_FILE).write_text(json.dumps(digests, indent=2) + "\n")


def _write_http_tokens(
    out: Path, parties: list[str], callers: list[str], *, force: bool = False
) -> None:
    """A bearer token for each HTTP caller (`<caller>/http-token`, owner-only; kept when it exists
    unless `force`), and in each party's directory `http-tokens.json`: caller -> SHA-256 of every
    HTTP caller's token under `out`, what a gateway started with `--http-auth token` accepts. A
    gateway so holds no caller's token, and the HTTP token is not the caller's gRPC token: one
    who reads it can ask a gateway for predictions, not drive training or `vfl predict`."""
    from vfl_wire.security import HTTP_TOKEN_FILE, HTTP_TOKENS_FILE, token_digest

    for caller in callers:
        path = out / caller / HTTP_TOKEN_FILE
        if force or not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_secret(path, secrets.token_urlsafe(32).encode() + b"\n")
    digests = {
        p.parent.name: token_digest(p.read_bytes())
        for p in sorted(out.glob(f"*/{HTTP_TOKEN_FILE}"))
    }
    for party in parties:
        (out / party / HTTP_TOKENS_FILE).write_text(json.dumps(digests, indent=2) + "\n")


def parse_http_callers(text: str, parties: list[str]) -> list[str]:
    """--http-callers: names of the gateway's HTTP callers (the operator, applications)."""
    from vfl_wire.security import COORDINATOR

    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        check_name(name)
        if name == COORDINATOR or name in parties:
            raise ConfigError(f"--http-callers: {name!r} is the coordinator or a party")
    if len(set(names)) != len(names):
        raise ConfigError(f"--http-callers: duplicated names in {text!r}")
    return names


def _write_pins(out: Path, pins: Mapping[str, list[int] | None]) -> None:
    """coordinator/blocks.json: which blocks each party may hold, so that by default no party
    takes another's block (one that registered first as block 0 kept party0 out). A party given
    without blocks keeps those of an earlier `vfl certs`, else gets the block of its place in
    this list, refused if another party holds that pin already; blocks named explicitly may be
    shared (a standby identity for a block), and the registry still lets one hold it at a time."""
    from vfl_wire.security import BLOCKS_FILE, COORDINATOR

    path = out / COORDINATOR / BLOCKS_FILE
    merged: dict[str, list[int]] = {}
    if path.is_file():
        try:
            merged = {str(k): [int(b) for b in v] for k, v in json.loads(path.read_text()).items()}
        except (ValueError, TypeError, AttributeError) as err:
            raise ConfigError(
                f"{path}: not a mapping of party ids to block lists ({err})"
            ) from None
    for place, (name, blocks) in enumerate(pins.items()):
        if blocks is not None:
            merged[name] = list(blocks)
        elif name not in merged:
            owner = next((n for n, b in merged.items() if place in b and n != name), None)
            if owner is not None:
                raise ConfigError(
                    f"{name!r} would be pinned to block {place}, which is {owner!r}'s ({path}); "
                    f"name its blocks, e.g. --parties {name}:{1 + max(max(merged.values()))}"
                )
            merged[name] = [place]
    path.write_text(json.dumps(dict(sorted(merged.items()))) + "\n")


# ---------------------------------------------------------------------------------------------
# Command
# ---------------------------------------------------------------------------------------------


@user_errors
def certs(
    out: Annotated[Path, Opt(help="directory to write (reused: only missing identities added)")],
    parties: Annotated[str, Opt(help="party ids, comma-separated, e.g. party0,party1")],
    hosts: Annotated[
        str, Opt(help="extra DNS names / IP addresses for every certificate, comma-separated")
    ] = "",
    days: Annotated[int, Opt(help="validity of the certificates in days")] = DEFAULT_DAYS,
    force: Annotated[bool, Opt(help="rewrite identities that exist (new keys and tokens)")] = False,
    http_callers: Annotated[
        str,
        Opt(
            help="who gets a bearer token for a gateway's HTTP endpoint (--http-auth token), "
            "comma-separated; written to <out>/<caller>/http-token"
        ),
    ] = OPERATOR_NAME,
) -> None:
    """Create the federation's CA, certificates and tokens (see docs/security.md)."""
    from vfl_wire.security import OPERATOR

    pins = parse_pins(parties)
    names = list(pins)
    extra = [h.strip() for h in hosts.split(",") if h.strip()]
    if days < 1:
        raise ConfigError("--days must be at least 1")
    callers = parse_http_callers(http_callers, names)
    written = create_federation(
        out, names, extra, days=days, force=force, pins=pins, http_callers=callers
    )
    typer.echo(f"wrote {', '.join(written) or 'nothing (all identities exist)'} in {out}")
    typer.echo(
        f"give each process only its own directory: {out}/coordinator to vfl-coordinator, "
        f"{out}/<party> to that party's vfl-client, {out}/{OPERATOR} to vfl evaluate/predict, "
        f"{out}/<caller>/http-token to each caller of a gateway's HTTP endpoint; "
        f"keep {out}/ca.key offline"
    )
