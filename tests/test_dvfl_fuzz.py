"""Hostile DVFL messages against a real party server (real servicer, guard interceptor, server
options and a dvfl Party on 127.0.0.1:0), in the manner of test_fuzz.py: every bad GuestStep,
HostStep, HostOutput, OwnerFeed or OwnerTrain (each a generic Step of method dvfl) is refused
with a clear status code, leaves the party exactly as it was (weights, optimiser state,
registers, the owner's inputs, its round) and the next valid round goes through; an identical
replay gets the cached answer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz import (
    FUZZ,
    HEADERS,
    RUN,
    TIMEOUT,
    assert_refused,
    optimizer_state,
    serve_party,
    tensors,
)

from vfl_core.config import DvflConfig, TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.training.alignment import batch_digest
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.tensors import decode_array, encode_array
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

DIM = 8  # guest and host codes (the width test_fuzz's tensors() gets wrong)
BATCH = 8
SAMPLES = 50  # registers per guest
K = 2
DVFL_RPCS = ["GuestStep", "HostStep", "HostOutput", "OwnerFeed", "OwnerTrain"]


@dataclass
class DvflServer:
    party: Party
    stub: vfl_pb2_grpc.PartyStub
    channel: grpc.Channel
    header: vfl_pb2.Header
    next_round: int = 0

    def fingerprint(self) -> str:
        roles = self.party.dvfl
        assert roles is not None
        state = [self.party.last_round, self.party.parameters_vector().tobytes()]
        state += optimizer_state([roles.guest_opt, roles.host_opt, roles.owner_opt])
        tensors_ = [roles.owner_inputs, roles.owner_fed]
        if roles.registers is not None:
            tensors_ += [roles.registers.values, roles.registers.written]
        state += [t.numpy().tobytes() for t in tensors_ if t is not None]
        return hashlib.sha256(repr(state).encode()).hexdigest()

    def rows(self, r: int) -> np.ndarray:
        return np.arange(r % 40, r % 40 + BATCH, dtype=np.int64)

    def guest(self, r: int, write: bool = True) -> vfl_pb2.StepRequest:
        rows = self.rows(r)
        keys = self.party.alignment_keys("train")
        digest = batch_digest(keys[int(i)] for i in rows)
        request = step_request(self.header, "GuestStep", r, rows=encode_array(rows), digest=digest)
        request.scalars["write"].flag = write
        return request

    def host(self, r: int, writes: dict[int, np.ndarray] | None = None) -> vfl_pb2.StepRequest:
        writes = {0: np.ones((BATCH, DIM), np.float32)} if writes is None else writes
        request = step_request(self.header, "HostStep", r)
        request.scalars["samples"].int = SAMPLES
        request.tensors["index"].CopyFrom(encode_array(self.rows(r)))
        for g, a in writes.items():
            request.maps["writes"].items[g].CopyFrom(encode_array(a))
        request.scalars["steps"].int = 1
        return request

    def feed(self, r: int) -> vfl_pb2.StepRequest:
        guest = self.guest(r)
        request = step_request(self.header, "OwnerFeed", r, rows=guest.rows, digest=guest.digest)
        for h in range(K):
            request.maps["outputs"].items[h].CopyFrom(
                encode_array(np.full((BATCH, DIM), 0.5, np.float32))
            )
        return request

    def valid_round(self) -> int:
        """A guest step that writes, a host step with it, and an owner feed; all succeed."""
        r = self.next_round
        self.next_round += 1
        reply = self.stub.Step(self.guest(r), timeout=TIMEOUT)
        assert reply.round_id == r and tuple(reply.tensors["activations"].shape) == (BATCH, DIM)
        acts = decode_array(reply.tensors["activations"], expect_dtype="float32")
        assert acts is not None
        host = self.stub.Step(self.host(r, {1: acts}), timeout=TIMEOUT)
        assert host.round_id == r and host.scalars["replayed"].int == 1
        self.stub.Step(self.feed(r), timeout=TIMEOUT)
        return r

    def refused(self, rpc: str, request: object) -> grpc.StatusCode:
        """`rpc`: the DVFL step the request is for; every step travels as the generic Step."""
        assert isinstance(request, vfl_pb2.StepRequest) and request.step == rpc
        return assert_refused(self.stub, "Step", request, self.fingerprint)


def step_request(
    header: vfl_pb2.Header,
    step: str,
    round_id: int,
    split: str = "",
    rows: vfl_pb2.Tensor | None = None,
    digest: bytes = b"",
) -> vfl_pb2.StepRequest:
    """A DVFL step's request on the generic Step RPC."""
    request = vfl_pb2.StepRequest(
        header=header, method="dvfl", step=step, round_id=round_id, split=split, digest=digest
    )
    if rows is not None:
        request.rows.CopyFrom(rows)
    return request


def host_output(
    header: vfl_pb2.Header, split: str, index: vfl_pb2.Tensor, from_registers: bool = False
) -> vfl_pb2.StepRequest:
    request = step_request(header, "HostOutput", 0, split=split)
    request.tensors["index"].CopyFrom(index)
    request.scalars["from_registers"].flag = from_registers
    return request


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DvflServer]:
    out = tmp_path_factory.mktemp("dvfl-fuzz-data")
    paths = prepare_parties(load_dataset("digits"), out, K, [0.0] * K, [0.0] * K, 0.2, seed=0)
    dvfl = DvflConfig(guest_hidden=(12,), guest_dim=DIM, host_hidden=(12,), host_dim=DIM)
    train = TrainConfig(method="dvfl", batch_size=BATCH, dvfl=dvfl)
    party = Party("party0", load_party_dir(paths[0]), train, secret=b"fuzz")
    with serve_party(party) as channel:
        header = convert.header(RUN, "party0")
        s = DvflServer(party, vfl_pb2_grpc.PartyStub(channel), channel, header)
        s.valid_round()
        yield s


@FUZZ
@given(header=HEADERS, rpc=st.sampled_from(DVFL_RPCS))
def test_given_header_for_another_party_or_run_when_sent_then_permission_denied(
    server: DvflServer, header: vfl_pb2.Header, rpc: str
) -> None:
    r = server.next_round
    request = {
        "GuestStep": server.guest(r),
        "HostStep": server.host(r),
        "HostOutput": host_output(server.header, "test", encode_array(np.arange(2))),
        "OwnerFeed": server.feed(r),
        "OwnerTrain": step_request(server.header, "OwnerTrain", r),
    }[rpc]
    request.header.CopyFrom(header)
    assert server.refused(rpc, request) == grpc.StatusCode.PERMISSION_DENIED
    server.valid_round()


@FUZZ
@given(data=st.data(), target=st.sampled_from(["rows", "write", "index", "output", "activation"]))
def test_given_bad_tensor_when_sent_then_refused_and_next_round_proceeds(
    server: DvflServer, data: st.DataObject, target: str
) -> None:
    r = server.next_round
    bad = data.draw(tensors())
    if target == "rows":
        rpc, request = "GuestStep", server.guest(r)
        request.rows.CopyFrom(data.draw(tensors(rows=BATCH, width=1)))
    elif target == "write":
        rpc, request = "HostStep", server.host(r)
        request.maps["writes"].items[data.draw(st.sampled_from([0, 1]))].CopyFrom(bad)
    elif target == "index":
        rpc, request = "HostStep", server.host(r)
        request.tensors["index"].CopyFrom(data.draw(tensors(rows=BATCH, width=1)))
    elif target == "output":
        rpc, request = "OwnerFeed", server.feed(r)
        request.maps["outputs"].items[data.draw(st.sampled_from([0, 1]))].CopyFrom(bad)
    else:
        index = encode_array(np.arange(BATCH, dtype=np.int64))
        rpc = "HostOutput"
        request = host_output(server.header, "test", index)
        request.maps["activations"].items[data.draw(st.sampled_from([0, 1]))].CopyFrom(bad)
    server.refused(rpc, request)
    server.valid_round()


def _index(values: list[int]) -> vfl_pb2.Tensor:
    return encode_array(np.array(values, dtype=np.int64))


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("samples_other", "registers hold 50"),
        ("samples_zero", "not a positive count"),
        ("samples_huge", "registers hold 50"),
        ("steps", "outside 0..1000"),
        ("index_range", "outside 0..49"),
        ("index_repeated", "repeated sample index"),
        ("index_negative", "negative value"),
        ("guest_unknown", "no such block"),
        ("writes_without_index", "without sample indices"),
        ("registers_from_test", "training samples only"),
        ("registers_with_data", "activations sent with from_registers"),
        ("owner_digest", "digest mismatch"),
        ("owner_host_unknown", "no such block"),
        ("guest_digest", "digest mismatch"),
        ("guest_rows_range", "rows out of range"),
    ],
)
def test_given_inconsistent_dvfl_message_when_sent_then_invalid_argument_naming_it(
    server: DvflServer, case: str, message: str
) -> None:
    r = server.next_round
    ones = encode_array(np.ones((BATCH, DIM), np.float32))
    rpc = "HostStep"
    request: object = server.host(r)
    if case == "samples_other":
        request.scalars["samples"].int = SAMPLES + 1
    elif case == "samples_zero":
        request.scalars["samples"].int = 0
    elif case == "samples_huge":
        request.scalars["samples"].int = 10**12
    elif case == "steps":
        request.scalars["steps"].int = 5000
    elif case == "index_range":
        request.tensors["index"].CopyFrom(_index([*range(BATCH - 1), SAMPLES]))
    elif case == "index_repeated":
        request.tensors["index"].CopyFrom(_index([0] * BATCH))
    elif case == "index_negative":
        request.tensors["index"].CopyFrom(_index([-1, *range(BATCH - 1)]))
    elif case == "guest_unknown":
        request.maps["writes"].items[9].CopyFrom(ones)
    elif case == "writes_without_index":
        request.tensors["index"].CopyFrom(_index([]))
    elif case.startswith("registers"):
        rpc = "HostOutput"
        split = "test" if case == "registers_from_test" else "train"
        request = host_output(server.header, split, _index([0, 1]), from_registers=True)
        if case == "registers_with_data":
            request.maps["activations"].items[0].CopyFrom(
                encode_array(np.ones((2, DIM), np.float32))
            )
    elif case.startswith("owner"):
        rpc, request = "OwnerFeed", server.feed(r)
        if case == "owner_digest":
            request.digest = b"x" * 32
        else:
            request.maps["outputs"].items[5].CopyFrom(ones)
    else:
        rpc, request = "GuestStep", server.guest(r)
        if case == "guest_digest":
            request.digest = b"y" * 32
        else:
            request.rows.CopyFrom(_index([10**6]))
    with pytest.raises(grpc.RpcError) as err:
        server.stub.Step(request, timeout=TIMEOUT)
    assert isinstance(request, vfl_pb2.StepRequest) and request.step == rpc
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert message in err.value.details()
    server.valid_round()


def test_given_replays_when_sent_then_cached_answer_and_stale_rounds_refused(
    server: DvflServer,
) -> None:
    r = server.valid_round()
    before = server.fingerprint()
    replay = server.stub.Step(server.guest(r), timeout=TIMEOUT)  # a retry after a timeout
    again = server.stub.Step(server.guest(r), timeout=TIMEOUT)
    assert replay == again and server.fingerprint() == before
    assert server.refused("GuestStep", server.guest(r, write=False)) == (
        grpc.StatusCode.INVALID_ARGUMENT  # the same round with other content
    )
    server.valid_round()
    for rpc, request in (("GuestStep", server.guest(r)), ("HostStep", server.host(r))):
        assert server.refused(rpc, request) == grpc.StatusCode.FAILED_PRECONDITION
    server.valid_round()
