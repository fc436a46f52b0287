"""Hostile DVFL messages against a real party server (real servicer, guard interceptor, server
options and a dvfl Party on 127.0.0.1:0), in the manner of test_fuzz.py: every bad GuestStep,
HostStep, HostOutput, OwnerFeed or OwnerTrain is refused with a clear status code, leaves the
party exactly as it was (weights, optimiser state, registers, the owner's inputs, its round) and
the next valid round goes through; an identical replay gets the cached answer."""

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
from vfl_wire.tensors import encode_array
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

    def guest(self, r: int, write: bool = True) -> vfl_pb2.GuestStepRequest:
        rows = self.rows(r)
        keys = self.party.alignment_keys("train")
        digest = batch_digest(keys[int(i)] for i in rows)
        return vfl_pb2.GuestStepRequest(
            header=self.header, round_id=r, rows=encode_array(rows), digest=digest, write=write
        )

    def host(self, r: int, writes: dict[int, np.ndarray] | None = None) -> vfl_pb2.HostStepRequest:
        writes = {0: np.ones((BATCH, DIM), np.float32)} if writes is None else writes
        return vfl_pb2.HostStepRequest(
            header=self.header,
            round_id=r,
            samples=SAMPLES,
            index=encode_array(self.rows(r)),
            writes={g: encode_array(a) for g, a in writes.items()},
            steps=1,
        )

    def feed(self, r: int) -> vfl_pb2.OwnerFeedRequest:
        guest = self.guest(r)
        outputs = {h: encode_array(np.full((BATCH, DIM), 0.5, np.float32)) for h in range(K)}
        return vfl_pb2.OwnerFeedRequest(
            header=self.header, round_id=r, rows=guest.rows, digest=guest.digest, outputs=outputs
        )

    def valid_round(self) -> int:
        """A guest step that writes, a host step with it, and an owner feed; all succeed."""
        r = self.next_round
        self.next_round += 1
        reply = self.stub.GuestStep(self.guest(r), timeout=TIMEOUT)
        assert reply.round_id == r and tuple(reply.activations.shape) == (BATCH, DIM)
        acts = convert.guest_result_from_proto(
            reply, call=convert.guest_call_from_proto(self.guest(r))
        )
        assert acts.activations is not None
        host = self.stub.HostStep(self.host(r, {1: acts.activations}), timeout=TIMEOUT)
        assert host.round_id == r and host.replayed == 1
        self.stub.OwnerFeed(self.feed(r), timeout=TIMEOUT)
        return r

    def refused(self, rpc: str, request: object) -> grpc.StatusCode:
        return assert_refused(self.stub, rpc, request, self.fingerprint)


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
        "HostOutput": vfl_pb2.HostOutputRequest(split="test", index=encode_array(np.arange(2))),
        "OwnerFeed": server.feed(r),
        "OwnerTrain": vfl_pb2.OwnerTrainRequest(round_id=r),
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
        request.writes[data.draw(st.sampled_from([0, 1]))].CopyFrom(bad)
    elif target == "index":
        rpc, request = "HostStep", server.host(r)
        request.index.CopyFrom(data.draw(tensors(rows=BATCH, width=1)))
    elif target == "output":
        rpc, request = "OwnerFeed", server.feed(r)
        request.outputs[data.draw(st.sampled_from([0, 1]))].CopyFrom(bad)
    else:
        index = encode_array(np.arange(BATCH, dtype=np.int64))
        rpc = "HostOutput"
        request = vfl_pb2.HostOutputRequest(header=server.header, split="test", index=index)
        request.activations[data.draw(st.sampled_from([0, 1]))].CopyFrom(bad)
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
        request.samples = SAMPLES + 1
    elif case == "samples_zero":
        request.samples = 0
    elif case == "samples_huge":
        request.samples = 10**12
    elif case == "steps":
        request.steps = 5000
    elif case == "index_range":
        request.index.CopyFrom(_index([*range(BATCH - 1), SAMPLES]))
    elif case == "index_repeated":
        request.index.CopyFrom(_index([0] * BATCH))
    elif case == "index_negative":
        request.index.CopyFrom(_index([-1, *range(BATCH - 1)]))
    elif case == "guest_unknown":
        request.writes[9].CopyFrom(ones)
    elif case == "writes_without_index":
        request.index.CopyFrom(_index([]))
    elif case.startswith("registers"):
        rpc = "HostOutput"
        split = "test" if case == "registers_from_test" else "train"
        request = vfl_pb2.HostOutputRequest(
            header=server.header, split=split, index=_index([0, 1]), from_registers=True
        )
        if case == "registers_with_data":
            request.activations[0].CopyFrom(encode_array(np.ones((2, DIM), np.float32)))
    elif case.startswith("owner"):
        rpc, request = "OwnerFeed", server.feed(r)
        if case == "owner_digest":
            request.digest = b"x" * 32
        else:
            request.outputs[5].CopyFrom(ones)
    else:
        rpc, request = "GuestStep", server.guest(r)
        if case == "guest_digest":
            request.digest = b"y" * 32
        else:
            request.rows.CopyFrom(_index([10**6]))
    with pytest.raises(grpc.RpcError) as err:
        getattr(server.stub, rpc)(request, timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert message in err.value.details()
    server.valid_round()


def test_given_replays_when_sent_then_cached_answer_and_stale_rounds_refused(
    server: DvflServer,
) -> None:
    r = server.valid_round()
    before = server.fingerprint()
    replay = server.stub.GuestStep(server.guest(r), timeout=TIMEOUT)  # a retry after a timeout
    again = server.stub.GuestStep(server.guest(r), timeout=TIMEOUT)
    assert replay == again and server.fingerprint() == before
    assert server.refused("GuestStep", server.guest(r, write=False)) == (
        grpc.StatusCode.INVALID_ARGUMENT  # the same round with other content
    )
    server.valid_round()
    for rpc, request in (("GuestStep", server.guest(r)), ("HostStep", server.host(r))):
        assert server.refused(rpc, request) == grpc.StatusCode.FAILED_PRECONDITION
    server.valid_round()
