"""Invariant 4: raw features, raw IDs and labels never leave their party.

The coordinator records every message it sends and receives (`--audit-log`); since parties only
talk to the coordinator, that is every message of the federation. The slow test runs a real
federation and searches every recorded message byte by byte. The fast tests pin the audit log
format and the interceptors themselves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
from google.protobuf.message import Message
from harness import Cluster, prepare_digits

from vfl_core.data.party_dir import load_party_dir
from vfl_core.errors import DataError
from vfl_wire import convert
from vfl_wire.audit import AuditLog, AuditRecord, read_audit
from vfl_wire.tensors import decode_array, encode_array
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

RUN_TIMEOUT_S = 180.0
# the default pipelined engine: a round's Backward and the next Embed travel as one Train call
KINDS = {"Register", "IdHashes", "Embed", "Train", "Predict", "Score", "Shutdown"}
ID_PREFIX = "digits-"  # every digits sample ID is "digits-<n>"


# ------------------------------------------------------------------------------ searching


def _key_offset(needle: bytes) -> int:
    """A 4-aligned 8-byte window of the needle with as many non-zero float32 values as possible
    (zeros are common in embeddings, so a window of zeros would match everywhere)."""
    nonzero = (np.frombuffer(needle, dtype=np.uint32) != 0).astype(int)
    return 4 * int(np.argmax(nonzero[:-1] + nonzero[1:]))


def find_needles(payloads: Sequence[bytes], needles: Sequence[bytes]) -> set[int]:
    """Indices of the needles (equal length, a multiple of 4, >= 8 bytes) that occur at any byte
    offset of any payload. Fast: each payload's 8-byte windows are looked up among one key per
    needle, and only key hits are compared in full."""
    if not needles:
        return set()
    width = len(needles[0])
    offsets = np.array([_key_offset(n) for n in needles])
    keys = np.array(
        [int.from_bytes(n[j : j + 8], "little") for n, j in zip(needles, offsets, strict=True)],
        dtype=np.uint64,
    )
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    found: set[int] = set()
    for payload in payloads:
        if len(payload) < width:
            continue
        windows = np.ndarray((len(payload) - 7,), dtype="<u8", buffer=payload, strides=(1,))
        pos = np.searchsorted(sorted_keys, windows)
        pos[pos == len(sorted_keys)] = 0
        for at in np.flatnonzero(sorted_keys[pos] == windows):
            lo = np.searchsorted(sorted_keys, windows[at])
            hi = np.searchsorted(sorted_keys, windows[at], side="right")
            for i in order[lo:hi]:
                start = int(at) - int(offsets[i])
                if start >= 0 and payload[start : start + width] == needles[i]:
                    found.add(int(i))
    return found


def test_given_needle_at_odd_offset_when_searching_then_found_and_absent_ones_not() -> None:
    rng = np.random.default_rng(1)
    payloads = [rng.normal(size=1000).astype(np.float32).tobytes() for _ in range(3)]
    planted = payloads[1][4 * 17 + 1 : 4 * 17 + 1 + 64]  # unaligned
    zeros_then_value = np.array([0] * 14 + [0.5, 0.25], dtype=np.float32).tobytes()
    payloads.append(b"\x07" + zeros_then_value + b"\x09")
    absent = np.arange(16, dtype=np.float32).tobytes()

    found = find_needles(payloads, [absent, planted, zeros_then_value])

    assert found == {1, 2}


# ------------------------------------------------------------------------------ messages


def _tensors(message: Message) -> Iterator[tuple[str, vfl_pb2.Tensor]]:
    """Every Tensor inside a message, with its field path; the record of a method's generic
    Step names its tensors by their own names ("rows", "activations[3]")."""
    record = isinstance(message, vfl_pb2.StepRequest | vfl_pb2.StepReply | vfl_pb2.TensorMap)
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            named = record and field.name in ("tensors", "maps")
            keyed = record and field.name == "items"  # a TensorMap: prefix joins without a dot
            items = [
                (f"{k}" if named else f"[{k}]" if keyed else f"{field.name}[{k}]", v)
                for k, v in value.items()
            ]
            items = [(p, v) for p, v in items if isinstance(v, Message)]
        elif field.is_repeated:
            items = [(f"{field.name}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = [(field.name, value)]
        for path, item in items:
            if isinstance(item, vfl_pb2.Tensor):
                yield path, item
            elif isinstance(item, vfl_pb2.TensorMap):
                yield from ((f"{path}{p}", t) for p, t in _tensors(item))
            else:
                yield from ((f"{path}.{p}", t) for p, t in _tensors(item))


def _sent_by_party(record: AuditRecord) -> bool:
    """Replies of the Party service, and requests parties make to the coordinator."""
    if record.side == "client":
        return record.direction != "request"
    return record.direction == "request" and record.rpc == "Register"


# ------------------------------------------------------------------------------ the federation


@pytest.fixture(scope="module")
def audited_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Path], Path]]:
    dirs = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0)
    root = tmp_path_factory.mktemp("audit")
    audit = root / "messages.audit"
    with Cluster(root / "cluster") as cluster:
        coord, clients = cluster.federation(dirs, epochs=1, extra=["--audit-log", str(audit)])
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
        yield dirs, audit


@pytest.fixture(scope="module")
def records(audited_run: tuple[list[Path], Path]) -> list[AuditRecord]:
    return read_audit(audited_run[1])


@pytest.fixture(scope="module")
def parties(audited_run: tuple[list[Path], Path]) -> dict:
    return {d.name: load_party_dir(d) for d in audited_run[0]}


@pytest.mark.slow
def test_given_audited_run_when_read_then_every_message_kind_is_recorded_with_its_answer(
    records: list[AuditRecord],
) -> None:
    kinds = {r.rpc for r in records if r.direction == "request"}
    assert kinds >= KINDS, f"missing: {KINDS - kinds}"
    for method in {r.method for r in records}:
        asked = sum(r.method == method and r.direction == "request" for r in records)
        answered = sum(r.method == method and r.direction != "request" for r in records)
        assert asked == answered, f"{method}: {asked} requests, {answered} answers"
    for record in records:
        if record.direction != "error":
            record.message()  # every recorded message parses as its declared type
    assert {r.side for r in records if r.rpc == "Register"} == {"server"}
    assert {r.side for r in records if r.rpc == "Embed"} == {"client"}


@pytest.mark.slow
def test_given_audited_run_when_searching_messages_then_no_raw_feature_vector_occurs(
    records: list[AuditRecord], parties: dict
) -> None:
    vectors = [
        x.tobytes()
        for data in parties.values()
        for split in data.splits.values()
        for x in split.features.reshape(len(split), -1).astype("<f4")
        if np.ptp(x) > 0  # a constant vector (e.g. all zeros) could occur by chance
    ]
    assert len(vectors) > 5000
    payloads = [r.data for r in records]

    leaked = find_needles(payloads, vectors)

    assert not leaked, f"{len(leaked)} raw feature vectors found in messages"
    # positive control: the search does find what parties do send (an embedding row)
    replies = [r.message() for r in records if r.rpc == "Embed" and r.direction == "response"]
    embedding = next(e for e in (decode_array(m.embedding) for m in replies) if len(e) > 3)
    row = embedding[3].astype("<f4").tobytes()
    assert find_needles(payloads, [row]) == {0}


@pytest.mark.slow
def test_given_audited_run_when_searching_messages_then_no_raw_or_plainly_hashed_id_occurs(
    records: list[AuditRecord], parties: dict
) -> None:
    blob = b"\x00".join(r.data for r in records)
    for encoding in ("utf-8", "utf-16-le", "utf-32-le"):
        assert ID_PREFIX.encode(encoding) not in blob, f"a raw ID ({encoding}) left a party"
    ids = {i for data in parties.values() for s in data.splits.values() for i in s.ids.tolist()}
    plain = [hashlib.sha256(i.encode()).digest() for i in sorted(ids)]
    assert not find_needles([r.data for r in records], plain), "unkeyed ID hashes on the wire"
    hashes = [
        h for r in records if r.rpc == "IdHashes" and r.direction == "response"
        for h in r.message().hashes
    ]  # fmt: skip
    assert len(hashes) >= len(ids) and all(len(h) == 32 for h in hashes)


@pytest.mark.slow
def test_given_audited_run_when_inspecting_party_messages_then_no_labels_leave_a_party(
    records: list[AuditRecord], parties: dict
) -> None:
    from_parties = [r for r in records if _sent_by_party(r)]
    assert len(from_parties) > 100
    num_classes = next(iter(parties.values())).meta.num_classes
    for record in from_parties:
        if record.direction == "error":
            continue
        for path, tensor in _tensors(record.message()):
            if tensor.dtype in ("int64", "int32"):
                # the only integer tensors a party sends are its confusion counts (aggregates)
                assert (record.rpc, path.split("[")[0]) == ("Score", "confusion"), path
                assert list(tensor.shape) == [num_classes, num_classes], path

    # the labels of every batch a party was asked about appear in none of its answers
    party_blob = [r.data for r in from_parties]
    label_vectors = _batch_labels(records, parties)
    assert len(label_vectors) > 20
    needles = [v.astype(d).tobytes() for v in label_vectors for d in ("<i8", "<i4")]
    assert not find_needles(party_blob, needles), "a batch's label vector left a party"


def _batch_labels(records: list[AuditRecord], parties: dict) -> list[np.ndarray]:
    """The label vector of each batch in an Embed request (non-constant, at least 4 rows)."""
    labels_of = {
        (int(data.meta.block), name): split.labels
        for data in parties.values()
        for name, split in data.splits.items()
    }
    out = []
    for record in records:
        if record.rpc != "Embed" or record.direction != "request":
            continue
        request = record.message()
        block = int(request.header.party_id.removeprefix("party"))
        rows = decode_array(request.rows)
        labels = labels_of[(block, request.split)][rows]
        if len(labels) >= 4 and np.ptp(labels) > 0:
            out.append(labels)
    return out


# ------------------------------------------------------------------------------ fast: the log


def test_given_records_when_written_and_read_then_same_records_in_order(tmp_path: Path) -> None:
    path = tmp_path / "a.audit"
    with AuditLog(path) as audit:
        audit.write("/vfl.v1.Party/Embed", "request", "client", b"\x01\x02")
        audit.write("/vfl.v1.Party/Embed", "response", "client", b"")
        audit.write("/vfl.v1.Coordinator/Register", "error", "server", b"ALREADY_EXISTS: x")
    with AuditLog(path) as audit:  # appending to an existing log
        audit.write("/vfl.v1.Party/Shutdown", "request", "client", b"\x00" * 70000)

    records = read_audit(path)

    assert [(r.rpc, r.direction, r.side, len(r.data)) for r in records] == [
        ("Embed", "request", "client", 2),
        ("Embed", "response", "client", 0),
        ("Register", "error", "server", 17),
        ("Shutdown", "request", "client", 70000),
    ]
    assert records[0].service == "vfl.v1.Party"
    assert records[0].time_ns <= records[-1].time_ns


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_given_torn_last_record_when_read_then_data_error(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "a.audit"
    with AuditLog(path) as audit:
        audit.write("/vfl.v1.Party/Embed", "request", "client", b"\x01" * 30)
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(DataError, match="torn"):
        read_audit(path)


def test_given_file_that_is_not_an_audit_log_when_read_then_data_error(tmp_path: Path) -> None:
    path = tmp_path / "a.audit"
    path.write_bytes(b"hello")
    with pytest.raises(DataError, match="not an audit log"):
        read_audit(path)


class _FakeParty(vfl_pb2_grpc.PartyServicer):
    def Embed(self, request, context):
        return convert.embedding_to_proto(request.round_id, np.ones((2, 3), np.float32))

    def Score(self, request, context):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad rows")


@pytest.fixture
def audited_server(tmp_path: Path) -> Iterator[tuple[vfl_pb2_grpc.PartyStub, Path]]:
    path = tmp_path / "a.audit"
    audit = AuditLog(path)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2), interceptors=[audit.server_interceptor()]
    )
    vfl_pb2_grpc.add_PartyServicer_to_server(_FakeParty(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        audited = grpc.intercept_channel(channel, audit.client_interceptor())
        yield vfl_pb2_grpc.PartyStub(audited), path
    finally:
        channel.close()
        server.stop(None).wait()
        audit.close()


def test_given_interceptors_on_both_ends_when_calls_succeed_or_fail_then_all_is_recorded(
    audited_server: tuple[vfl_pb2_grpc.PartyStub, Path],
) -> None:
    stub, path = audited_server
    header = convert.header("run", "p")
    request = vfl_pb2.EmbedRequest(header=header, round_id=7, rows=encode_array(np.arange(2)))
    reply = stub.Embed(request, timeout=10)
    with pytest.raises(grpc.RpcError):
        stub.Score(vfl_pb2.ScoreRequest(header=header), timeout=10)

    records = read_audit(path)

    seen = sorted((r.side, r.rpc, r.direction) for r in records)
    assert seen == sorted(
        (side, rpc, direction)
        for side in ("client", "server")
        for rpc, direction in [
            ("Embed", "request"),
            ("Embed", "response"),
            ("Score", "request"),
            ("Score", "error"),
        ]
    )
    embed = [r for r in records if r.rpc == "Embed"]
    assert all(r.method == "/vfl.v1.Party/Embed" for r in embed)
    assert [r.message() for r in embed if r.direction == "request"] == [request, request]
    assert [r.message() for r in embed if r.direction == "response"] == [reply, reply]
    errors = [r.data.decode() for r in records if r.direction == "error"]
    assert errors == ["INVALID_ARGUMENT: bad rows"] * 2
