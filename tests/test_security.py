"""Security: certificates, mutual TLS, party authentication and the PSI alignment's audit.

The acceptance tests run a real federation (a vfl-coordinator and four vfl-client processes, TLS
on loopback, certificates from the real `vfl certs`, PSI alignment, audit log) and attack it with
real processes and raw gRPC calls: a certificate of another CA, a valid certificate with the wrong
token, a second registration for a taken block, a party acting for another, a caller that is not
the coordinator. Then the audit log is searched for any value from which an ID can be recomputed
without a party's secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from cryptography import x509
from harness import BIN, SECRET, Client, Cluster, Coordinator, prepare_digits

from vfl_cli.certs_cmd import create_federation, parse_names
from vfl_coordinator.admission import parse_parties
from vfl_core.errors import ConfigError
from vfl_core.protocol import PROTOCOL_VERSION
from vfl_core.training.alignment import DEMO_SECRET
from vfl_core.training.psi import id_point
from vfl_wire import convert
from vfl_wire.audit import read_audit
from vfl_wire.security import (
    COORDINATOR,
    OPERATOR,
    Security,
    load_identity,
    load_token_digests,
    token_digest,
)
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

RPC_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 240.0
PARTIES = [f"party{k}" for k in range(5)]  # party4: a spare identity, admitted, holding no block


# ------------------------------------------------------------------------------ vfl certs


def test_given_certs_when_created_then_layout_names_and_private_files(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    written = create_federation(out, ["party0", "party1"], ["vfl.example.org", "10.0.0.5"])
    assert written == [COORDINATOR, "party0", "party1", OPERATOR]
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    for name in written:
        cert = x509.load_pem_x509_certificate((out / name / "cert.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = san.get_values_for_type(x509.DNSName)
        assert load_identity(out, name).name == name and dns[0] == name
        assert {"localhost", "vfl.example.org"} <= set(dns)
        assert "10.0.0.5" in {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
        assert stat.S_IMODE(os.stat(out / name / "key.pem").st_mode) == 0o600
    party1 = x509.load_pem_x509_certificate((out / "party1" / "cert.pem").read_bytes())
    dns = party1.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = dns.get_values_for_type(x509.DNSName)
    assert "client1" in names and "coordinator" not in names  # its own compose service only
    assert stat.S_IMODE(os.stat(out / "ca.key").st_mode) == 0o600
    digests = load_token_digests(out / COORDINATOR / "tokens.json")
    assert set(digests) == {"party0", "party1", OPERATOR}
    assert digests["party0"] == token_digest((out / "party0" / "token").read_bytes())
    assert not (out / COORDINATOR / "token").exists()
    # again over the same directory: the CA stays, only the new identity is added
    assert create_federation(out, ["party0", "party1", "party2"]) == ["party2"]
    assert set(load_token_digests(out / COORDINATOR / "tokens.json")) == {
        "party0",
        "party1",
        "party2",
        OPERATOR,
    }
    x509.load_pem_x509_certificate(
        (out / "party2" / "cert.pem").read_bytes()
    ).verify_directly_issued_by(ca)


def test_given_identity_dir_of_another_name_when_loaded_then_refused(tmp_path: Path) -> None:
    create_federation(tmp_path, ["party0", "party1"])
    with pytest.raises(ConfigError, match="certificate of 'party0', not of 'party1'"):
        load_identity(tmp_path / "party0", "party1")
    with pytest.raises(ConfigError, match="vfl certs"):
        load_identity(tmp_path / "nowhere", "party0")
    assert load_identity(tmp_path / "party1", "party1").name == "party1"  # its own dir works


def test_given_bad_names_when_certs_requested_then_one_line_error(tmp_path: Path) -> None:
    for names in ("party_0", "coordinator", "a,a", ""):
        with pytest.raises(ConfigError):
            parse_names(names)
    result = subprocess.run(  # the real command: exit 2, one line, nothing written
        [str(BIN / "vfl"), "certs", "--out", str(tmp_path / "c"), "--parties", "party_0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: "), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "c").exists()


def test_given_needles_anywhere_when_searched_then_found() -> None:
    """The audit search below finds a value at any offset, across chunk boundaries too."""
    needle = hashlib.sha256(b"x").digest()
    for offset in (0, 1, 7, 31, 999):
        blob = os.urandom(offset) + needle + os.urandom(50)
        assert _find_any(blob, [needle, id_point("y")], chunk=64) == [needle]
    assert _find_any(os.urandom(5000), [needle]) == []


def test_given_parties_option_when_parsed_then_ids_and_blocks_or_one_line_error() -> None:
    assert parse_parties("party0, party1:1,party2:2+3") == {
        "party0": None,
        "party1": [1],
        "party2": [2, 3],
    }
    for bad in ("", "party0,party0", "party0:x", ":1"):
        with pytest.raises(ConfigError, match="--parties"):
            parse_parties(bad)


# ------------------------------------------------------------------------------ a TLS federation


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The federation's certificates and another CA's, made by the real `vfl certs`."""
    base = tmp_path_factory.mktemp("certs")
    out = {"ours": base / "ours", "other": base / "other"}
    for key, path in out.items():
        # party4, the spare, may stand in for any block (each party is pinned to its own)
        parties = ",".join([*PARTIES[:4], "party4:0+1+2+3"] if key == "ours" else PARTIES[:1])
        subprocess.run(
            [str(BIN / "vfl"), "certs", "--out", str(path), "--parties", parties],
            check=True,
            capture_output=True,
            timeout=120,
        )
    wrong = base / "wrong-token"
    wrong.write_text("not-the-token\n")
    out["wrong_token"] = wrong
    return out


@pytest.fixture(scope="module")
def federation(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path], party_dirs: list[Path]
) -> Iterator[tuple[Cluster, Coordinator, list[Client], Path]]:
    """Four parties over mutual TLS, aligned by PSI, trained for one epoch, then serving."""
    root = tmp_path_factory.mktemp("tls")
    audit = root / "audit.bin"
    with Cluster(root / "cluster", tls_dir=certs["ours"]) as cluster:
        coord, clients = cluster.federation(
            party_dirs,
            epochs=1,
            deadline=5.0,
            serve=True,
            alignment="psi",
            extra=["--audit-log", str(audit), "--batch-size", "512"],
        )
        cluster.wait_for(
            lambda: coord.alive() and _status(cluster, coord).state == "serving",
            RUN_TIMEOUT_S,
            "the TLS federation to train and serve",
        )
        yield cluster, coord, clients, audit


def _status(cluster: Cluster, coord: Coordinator) -> vfl_pb2.StatusReply:
    request = vfl_pb2.StatusRequest(header=convert.header("", ""))
    return cluster.stub(coord).Status(request, timeout=RPC_TIMEOUT_S)


def _holders(cluster: Cluster, coord: Coordinator) -> dict[int, str]:
    return {p.block: p.party_id for p in _status(cluster, coord).parties}


def _as(
    certs: Path, name: str, address: str, peer: str = COORDINATOR, token: Path | None = None
) -> grpc.Channel:
    """A TLS channel calling as `name` (its token, or the file `token`) to `peer`."""
    identity = load_identity(certs, name, token_file=token, need_token=name != COORDINATOR)
    return Security(identity).channel(address, peer)


def _register(
    channel: grpc.Channel, party_id: str, block: int, header_party: str | None = None
) -> vfl_pb2.RegisterReply:
    info = vfl_pb2.PartyInfoMsg(
        party_id=party_id, block=block, num_blocks=4, dataset="digits", feature_shape=[1, 4, 4],
        num_classes=10, has_labels=True, samples={"train": 10}, protocol_version=PROTOCOL_VERSION,
    )  # fmt: skip
    header = convert.header("", party_id if header_party is None else header_party)
    request = vfl_pb2.RegisterRequest(header=header, info=info, address="127.0.0.1:1")
    return vfl_pb2_grpc.CoordinatorStub(channel).Register(request, timeout=RPC_TIMEOUT_S)


def _refused(call, code: grpc.StatusCode, contains: str = "") -> str:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == code, f"{err.value.code()}: {err.value.details()}"
    assert contains in (err.value.details() or ""), err.value.details()
    return err.value.details() or ""


def _client_of(clients: list[Client], block: int) -> Client:
    return next(c for c in clients if c.block == block)


# ------------------------------------------------------------------------------ acceptance


@pytest.mark.slow
def test_given_coordinator_frozen_while_clients_start_when_thawed_then_they_join(
    certs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """A handshake cut short (the coordinator frozen: "Handshake read failed (Endpoint
    closing)") is retried like an unreachable coordinator. Every client once took it for a
    certificate of another CA and stopped for good (exit 2), and the run never started."""
    two = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.0, seed=0, clients=2)
    with Cluster(tmp_path / "cluster", tls_dir=certs["ours"]) as cluster:
        coord = cluster.coordinator(clients=2, epochs=1, alignment="psi")
        coord.port()
        coord.signal(signal.SIGSTOP)
        try:
            clients = [cluster.client(coord, d) for d in two]
            cluster.wait_for(
                lambda: all("not reachable yet" in c.log() or not c.alive() for c in clients),
                RUN_TIMEOUT_S,
                "the clients to fail a handshake with the frozen coordinator",
            )
        finally:
            coord.signal(signal.SIGCONT)
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(60) == 0, client.tail()
            assert "TLS handshake" not in client.log()
            assert "Handshake read failed" in client.log() or "not reachable yet" in client.log()


@pytest.mark.slow
def test_given_certificate_of_another_ca_when_client_joins_then_refused(
    federation: tuple[Cluster, Coordinator, list[Client], Path],
    certs: dict[str, Path],
    party_dirs: list[Path],
) -> None:
    cluster, coord, _, _ = federation
    intruder = cluster.client(coord, party_dirs[0], ["--tls-dir", str(certs["other"])])
    assert intruder.wait(90) == 2, intruder.tail()
    assert "TLS handshake with the coordinator" in intruder.log()
    # the server side too: a raw call with the other CA's certificate (trusting our CA)
    other = load_identity(certs["other"], "party0", need_token=True)
    ours = load_identity(certs["ours"], "party0")
    mixed = Security(
        type(other)(other.name, other.directory, ours.ca, other.cert, other.key, other.token)
    )
    with mixed.channel(coord.address, COORDINATOR) as channel:
        _refused(lambda: _register(channel, "party0", 0), grpc.StatusCode.UNAVAILABLE)
    # and plaintext is no way in
    with grpc.insecure_channel(coord.address) as channel:
        _refused(lambda: _register(channel, "party0", 0), grpc.StatusCode.UNAVAILABLE)
    assert _holders(cluster, coord) == {k: f"party{k}" for k in range(4)}


@pytest.mark.slow
def test_given_valid_certificate_and_wrong_token_when_client_joins_then_refused(
    federation: tuple[Cluster, Coordinator, list[Client], Path],
    certs: dict[str, Path],
    party_dirs: list[Path],
) -> None:
    cluster, coord, _, _ = federation
    argv = ["--party-id", "party4", "--token-file", str(certs["wrong_token"])]
    intruder = cluster.client(coord, party_dirs[0], argv)
    assert intruder.wait(90) == 2, intruder.tail()
    assert "UNAUTHENTICATED" in intruder.log() and "token" in intruder.log()
    with _as(certs["ours"], "party0", coord.address, token=certs["wrong_token"]) as channel:
        _refused(lambda: _register(channel, "party0", 0), grpc.StatusCode.UNAUTHENTICATED, "token")
    with _as(
        certs["ours"], "party4", coord.address, token=certs["ours"] / "party0" / "token"
    ) as ch:
        _refused(lambda: _register(ch, "party4", 0), grpc.StatusCode.UNAUTHENTICATED)  # not its
    assert _holders(cluster, coord) == {k: f"party{k}" for k in range(4)}


@pytest.mark.slow
def test_given_taken_block_when_another_party_registers_for_it_then_refused_naming_holder(
    federation: tuple[Cluster, Coordinator, list[Client], Path],
    certs: dict[str, Path],
    party_dirs: list[Path],
) -> None:
    cluster, coord, _, _ = federation
    second = cluster.client(coord, party_dirs[0], ["--party-id", "party4"])
    assert second.wait(90) == 2, second.tail()
    assert "ALREADY_EXISTS" in second.log()
    assert "block 0 is already held by party 'party0'" in second.log()
    with _as(certs["ours"], "party4", coord.address) as channel:
        _refused(
            lambda: _register(channel, "party4", 0),
            grpc.StatusCode.ALREADY_EXISTS,
            "block 0 is already held by party 'party0'",
        )
    assert _holders(cluster, coord) == {k: f"party{k}" for k in range(4)}


@pytest.mark.slow
def test_given_party_certificate_when_acting_for_another_or_beyond_its_role_then_denied(
    federation: tuple[Cluster, Coordinator, list[Client], Path], certs: dict[str, Path]
) -> None:
    cluster, coord, clients, _ = federation
    denied = grpc.StatusCode.PERMISSION_DENIED
    with _as(certs["ours"], "party1", coord.address) as channel:
        _refused(lambda: _register(channel, "party0", 0), denied, "certificate of 'party1'")
        _refused(lambda: _register(channel, "party1", 1, header_party="party0"), denied, "header")
        evaluate = vfl_pb2_grpc.CoordinatorStub(channel).Evaluate
        request = vfl_pb2.EvaluateRequest(header=convert.header("", ""), split="test")
        _refused(lambda: evaluate(request, timeout=RPC_TIMEOUT_S), denied, "may not call")
    with _as(certs["ours"], OPERATOR, coord.address) as channel:
        _refused(lambda: _register(channel, OPERATOR, 0), denied, "may not call")
    # a party's server answers only the coordinator's certificate
    party0 = _client_of(clients, 0)
    address = f"127.0.0.1:{party0.port()}"
    header = convert.header(coord.run_id, "party0")
    request = vfl_pb2.ClassWeightsRequest(header=header, split="test")
    for caller in ("party1", OPERATOR):
        with _as(certs["ours"], caller, address, peer="party0") as channel:
            call = vfl_pb2_grpc.PartyStub(channel).ClassWeights
            _refused(
                lambda c=call: c(request, timeout=RPC_TIMEOUT_S), denied, "only the coordinator"
            )
    # the coordinator's certificate is accepted, and a channel refuses a server of the wrong name
    with _as(certs["ours"], COORDINATOR, address, peer="party0") as channel:
        stub = vfl_pb2_grpc.PartyStub(channel)
        # admitted (past the guard), and refused by the party itself: its class weights would
        # give its labels away, and this run does not balance classes
        _refused(
            lambda: stub.ClassWeights(request, timeout=RPC_TIMEOUT_S),
            grpc.StatusCode.FAILED_PRECONDITION,
            "does not balance classes",
        )
        # a PSI party hands out no ID hashes, not even to the coordinator
        hashes = vfl_pb2.IdHashesRequest(header=header, split="test")
        _refused(
            lambda: stub.IdHashes(hashes, timeout=RPC_TIMEOUT_S),
            grpc.StatusCode.FAILED_PRECONDITION,
            "PSI only",
        )
    with _as(certs["ours"], COORDINATOR, address, peer="party1") as channel:
        call = vfl_pb2_grpc.PartyStub(channel).ClassWeights
        _refused(lambda: call(request, timeout=RPC_TIMEOUT_S), grpc.StatusCode.UNAVAILABLE)
    assert party0.alive() and _status(cluster, coord).state == "serving"


@pytest.mark.slow
def test_given_psi_federation_when_audited_then_no_value_recomputable_from_an_id(
    federation: tuple[Cluster, Coordinator, list[Client], Path], party_dirs: list[Path]
) -> None:
    """Everything that reached or left the coordinator, searched for any value that can be
    computed from a sample ID without a party's PSI secret: the ID itself, its SHA-256, its
    SHA-512 point (vfl_core.training.psi.id_point), its keyed hashes under the demo and the harness
    secrets (which the parties hold, the coordinator must not)."""
    cluster, coord, _, audit = federation
    report = cluster.stub(coord).Evaluate(
        vfl_pb2.EvaluateRequest(header=convert.header("", ""), split="test"), timeout=120
    )
    assert report.rows[-1].samples > 0 and sorted(report.live_blocks) == [0, 1, 2, 3]
    records = read_audit(audit)
    rpcs = {r.rpc for r in records}
    assert {"PsiBlind", "PsiApply", "PsiKeys", "Embed", "Train"} <= rpcs  # (pipelined rounds)
    assert "IdHashes" not in rpcs
    ids = sorted({i for d in party_dirs for s in ("train", "test") for i in _ids(d / s)})
    derived = [
        v
        for i in ids
        for v in (
            id_point(i),
            hashlib.sha256(i.encode()).digest(),
            hmac.new(SECRET.encode(), i.encode(), hashlib.sha256).digest(),
            hmac.new(DEMO_SECRET.encode(), i.encode(), hashlib.sha256).digest(),
        )
    ]
    blob = b"".join(r.data for r in records)
    assert len(blob) > 32 * len(ids)  # the PSI lists are in there
    assert not _find_any(blob, derived), "a value derived from an ID reached the coordinator"
    raw = sorted({i.encode() for i in ids})
    assert not _find_any(blob, raw), "a raw ID reached the coordinator"


def _ids(split_dir: Path) -> list[str]:
    path = split_dir / "ids.npy"
    return [str(i) for i in np.load(path, allow_pickle=False)] if path.exists() else []


def _find_any(blob: bytes, needles: list[bytes], chunk: int = 1 << 22) -> list[bytes]:
    """The needles found anywhere in `blob`, at any offset: one vectorised pass per needle
    length over the blob's windows of that length (their first 8 bytes as an integer looked up
    in the needles' sorted prefixes, a hit compared in full), in chunks that overlap by the
    length less one so a needle across a boundary is found too."""
    found: list[bytes] = []
    for length in sorted({len(n) for n in needles}):
        found += _find_length(blob, [n for n in needles if len(n) == length], length, chunk)
    return found


def _find_length(blob: bytes, needles: list[bytes], length: int, chunk: int) -> list[bytes]:
    width = min(8, length)
    wanted: dict[int, list[bytes]] = {}
    for n in needles:
        wanted.setdefault(int.from_bytes(n[:width].ljust(8, b"\0"), "little"), []).append(n)
    keys = np.array(sorted(wanted), dtype=np.uint64)
    found = []
    for start in range(0, max(1, len(blob) - length + 1), chunk):
        piece = blob[start : start + chunk + length - 1]
        if len(piece) < length:
            break
        data = np.frombuffer(piece, dtype=np.uint8)
        starts = data[: len(data) - length + width]  # a window of `width` at every start
        windows = np.lib.stride_tricks.sliding_window_view(starts, width)
        if width < 8:  # short needles: pad each window to 8 bytes as the keys are
            windows = np.pad(windows, ((0, 0), (0, 8 - width)))
        prefixes = np.ascontiguousarray(windows).view("<u8").ravel()
        at = np.minimum(np.searchsorted(keys, prefixes), len(keys) - 1)
        for h in np.flatnonzero(keys[at] == prefixes):
            found += [n for n in wanted[int(prefixes[h])] if piece[h : h + length] == n]
    return found
