"""The direct data plane's logic in one process (vfl_core/training/direct.py, direct_party.py):
the engine's Round calls and the parties' exchanges, with a threaded test transport whose links
are in memory (a working fake with fault injection), against the relay's in-process federation;
and the wire and config checks of the direct plane.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import digits_parties

from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.plane_choice import relay_only
from vfl_core.config import TrainConfig
from vfl_core.errors import ProtocolError
from vfl_core.model.quantize import round_trip
from vfl_core.protocol import (
    EmbedCall,
    EvalAnswer,
    EvalBatch,
    Evaluation,
    FuseCall,
    RoundCall,
    RoundResult,
    ScoreResult,
    Step,
)
from vfl_core.training.direct_party import EMBEDDING, GRADIENT, run_round
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.convert_direct import (
    PeerAddress,
    Push,
    push_from_proto,
    push_to_proto,
    round_call_from_proto,
    round_call_to_proto,
    round_result_from_proto,
    round_result_to_proto,
)

K = 3
WAIT_S = 1.0  # a head's wait for an embedding; a gradient is waited for twice as long
Drop = Callable[[str, int, int, int], bool]  # (kind, round, from, to) -> lost?


class MemoryLinks:
    """One party's links in a shared in-memory mailbox; tensors travel rounded to the wire
    dtype, as a Push carries them."""

    def __init__(self, block: int, net: ThreadedDirect) -> None:
        self.block, self.net = block, net

    def send(self, kind: str, round_id: int, to: int, tensor: np.ndarray | None) -> None:
        if self.net.drop(kind, round_id, self.block, to):
            return
        sent = None if tensor is None else round_trip(tensor, self.net.wire_dtype).copy()
        with self.net.cond:
            self.net.box[(to, kind, round_id, self.block)] = sent
            self.net.cond.notify_all()

    def receive(
        self, kind: str, round_id: int, senders: Collection[int], timeout: float
    ) -> dict[int, np.ndarray | None]:
        keys = {(self.block, kind, round_id, b) for b in senders}
        with self.net.cond:
            self.net.cond.wait_for(lambda: keys <= self.net.box.keys(), timeout)
            return {k[3]: self.net.box.pop(k) for k in keys if k in self.net.box}


class ThreadedDirect(InProcessTransport):
    """The in-process transport with `direct`: each party's Rounds on its own thread, in the
    order the engine starts them (several rounds are in flight: vfl_core.training.direct)."""

    def __init__(self, parties: dict[int, Party], drop: Drop | None = None) -> None:
        super().__init__(parties)
        self.drop: Drop = drop or (lambda *_: False)
        self.box: dict[tuple[int, str, int, int], np.ndarray | None] = {}
        self.cond = threading.Condition()
        # one worker per party, as vfl_client's servicer: a party runs its rounds in order.
        # Its torch thread count is the one the in-process federation it is compared with runs
        # at (the caller's): a new thread starts at torch's default, and a matmul split over
        # another number of threads adds up in another order, so the parties' numbers would
        # drift from the reference's by an ulp from the first head step on
        threads = torch.get_num_threads()
        self.workers = {
            b: ThreadPoolExecutor(1, initializer=torch.set_num_threads, initargs=(threads,))
            for b in parties
        }
        self.calls: list[dict[int, RoundCall]] = []

    def direct(self, calls: dict[int, RoundCall]) -> Callable[[], dict[int, RoundResult]]:
        self.calls.append(calls)
        waited = {
            b: replace(c, embed_wait_s=WAIT_S, grad_wait_s=2 * WAIT_S) for b, c in calls.items()
        }
        futures = {
            b: self.workers[b].submit(run_round, self.parties[b], c, MemoryLinks(b, self))
            for b, c in waited.items()
        }
        return lambda: {b: f.result() for b, f in futures.items()}


def _train(parties: dict[int, Party], transport, train: TrainConfig) -> list[RoundRecord]:
    records: list[RoundRecord] = []
    fed = Federation(transport, train, progress=False, on_round=records.append)
    fed.align()
    fed.train()
    return records


@pytest.mark.parametrize(
    ("wire", "staleness"), [("float32", 0), ("int8", 0), ("float32", 1), ("float32", 3)]
)
def test_given_the_direct_plane_in_process_when_trained_then_the_relays_numbers(
    tmp_path: Path, wire: str, staleness: int
) -> None:
    """Exact, and with --staleness: the pipelined relay's numbers (vfl_core.training.pipeline
    in process), the parties stepping earlier rounds in later Round calls."""
    train = TrainConfig(
        seed=0, epochs=2 if staleness else 1, wire_dtype=wire, data_plane="direct",
        staleness=staleness,
    )  # fmt: skip
    relay = digits_parties(tmp_path / "a", K, train, p_miss=0.2)
    want = _train(relay, InProcessTransport(relay), train)
    direct = digits_parties(tmp_path / "b", K, train, p_miss=0.2)
    transport = ThreadedDirect(direct)
    got = _train(direct, transport, train)

    assert transport.calls, "the rounds went through `direct`"
    assert [r.to_json() for r in got] == [r.to_json() for r in want]
    for block, party in relay.items():
        np.testing.assert_array_equal(direct[block].parameters_vector(), party.parameters_vector())


def test_given_a_lost_embedding_when_the_head_waits_then_it_fuses_without_it(
    tmp_path: Path,
) -> None:
    """Block 2's embedding of round 3 never reaches head 0: head 0 fuses on what it has after
    the wait and sends block 2 nothing, block 1 its gradient in time (a gradient is waited for
    longer than an embedding, as the deadlines make it), and steps on block 1's gradient alone:
    block 2 missed its wait, so for head 0 it is out of the round, as on the relay a party that
    misses the Embed deadline is not called to Fuse (a frozen head costs one wait, not an
    embedding's and a gradient's). The run goes on; block 2's gradient to it is left over."""
    train = TrainConfig(seed=0, epochs=1, data_plane="direct")
    parties = digits_parties(tmp_path, K, train)
    lost = (EMBEDDING, 3, 2, 0)
    transport = ThreadedDirect(parties, drop=lambda *key: key == lost)
    records = _train(parties, transport, train)

    assert len(records) > 5 and all(r.losses for r in records)
    assert records[3].present == (0, 1, 2) and records[3].updated == (0, 1, 2), records[3]
    assert sorted(transport.box) == [(0, GRADIENT, 3, 2)]  # (to, kind, round, from)


def test_given_round_messages_when_converted_then_they_round_trip() -> None:
    rows = np.array([3, 1, 2])
    call = RoundCall(
        round_id=7,
        epoch=1,
        embed=EmbedCall(7, "train", rows, b"d" * 32, True, (0, 1)),
        send_to=(0,),
        fuse=FuseCall(7, 1, {}, (0, 1), (0,)),
        expect=(1,),
        grads_from=(0,),
        holders=(),
        after=6,
        embed_wait_s=2.0,
        grad_wait_s=4.0,
    )
    peers = {0: PeerAddress("party0", "h:1"), 1: PeerAddress("party1", "h:2")}
    got, got_peers = round_call_from_proto(
        round_call_to_proto(call, convert.header("r", "party1"), peers)
    )
    assert got_peers == peers
    assert got.embed is not None and (got.embed.rows == rows).all()
    assert (got.round_id, got.send_to, got.expect, got.grads_from, got.after) == (
        7,
        (0,),
        (1,),
        (0,),
        6,
    )
    result = RoundResult(7, True, (1,), 0.25, True)
    assert round_result_from_proto(round_result_to_proto(result), round_id=7) == result
    tensor = np.ones((3, 4), np.float32)
    push = push_from_proto(push_to_proto(convert.header("r", "p"), Push(7, 1, GRADIENT, tensor)))
    assert (push.round_id, push.block, push.kind) == (7, 1, GRADIENT)
    np.testing.assert_array_equal(push.tensor, tensor)


def test_given_stale_round_steps_when_converted_then_they_round_trip_and_bad_ones_refused() -> None:
    """With --staleness a Round call carries earlier rounds' Backward (before its embed, after
    its fuse: the drain) and its reply the rounds it stepped."""
    h, peers = convert.header("r", "party1"), {0: PeerAddress("party0", "h:1")}
    rows = np.array([3, 1])
    call = RoundCall(
        round_id=9,
        epoch=2,
        embed=EmbedCall(9, "train", rows, b"d" * 32, True, (0, 1)),
        send_to=(0,),
        grads_from=(0,),
        steps_before=(Step(5, (0,)), Step(6, (0,))),
        defer_step=True,
    )
    got, _ = round_call_from_proto(round_call_to_proto(call, h, peers))
    assert (got.steps_before, got.steps_after, got.defer_step) == (call.steps_before, (), True)
    drain = RoundCall(round_id=9, epoch=2, after=9, steps_after=(Step(8, (0,)), Step(9, (0,))))
    got, _ = round_call_from_proto(round_call_to_proto(drain, h, peers))
    assert got.embed is None and got.fuse is None and got.steps_after == drain.steps_after
    result = RoundResult(9, steps=(8, 9))
    assert round_result_from_proto(round_result_to_proto(result), round_id=9) == result
    for bad in (
        replace(call, steps_before=(Step(9, (0,)),)),  # not an earlier round
        replace(call, steps_before=(Step(6, (0,)), Step(5, (0,)))),  # out of order
    ):
        with pytest.raises(ProtocolError, match="steps_before"):
            round_call_from_proto(round_call_to_proto(bad, h, peers))
    with pytest.raises(ProtocolError, match="no address for blocks"):
        round_call_from_proto(
            round_call_to_proto(replace(drain, steps_after=(Step(8, (2,)),)), h, peers)
        )


def test_given_direct_with_staleness_when_configured_then_taken_and_auto_may_go_direct() -> None:
    cfg = CoordinatorConfig.model_validate({"train": {"data_plane": "direct", "staleness": 3}})
    assert cfg.train.staleness == 3
    auto = CoordinatorConfig.model_validate({"train": {"data_plane": "auto", "staleness": 5}})
    assert relay_only(auto) is None


def test_given_bad_direct_messages_when_decoded_then_refused_with_a_line() -> None:
    h = convert.header("r", "p")
    req = round_call_to_proto(
        RoundCall(1, 0, embed=EmbedCall(1, "train", np.array([0]), b"", True), send_to=(2,)), h, {}
    )
    with pytest.raises(ProtocolError, match="no address for blocks"):
        round_call_from_proto(req)
    bad = push_to_proto(h, Push(1, 0, EMBEDDING, np.ones((2, 2), np.float32)))
    bad.kind = "labels"
    with pytest.raises(ProtocolError, match="push kind"):
        push_from_proto(bad)
    nan = push_to_proto(h, Push(1, 0, EMBEDDING, np.full((2, 2), np.nan, np.float32)))
    with pytest.raises(ProtocolError):
        push_from_proto(nan)


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"train": {"data_plane": "direct", "staleness": 7}}, "--staleness up to 5"),
        ({"train": {"data_plane": "direct", "method": "dvfl"}}, "steps of its own"),
        ({"train": {"data_plane": "direct"}, "faults": {"fail_rate": 0.1}}, "injected faults"),
    ],
)
def test_given_what_the_direct_plane_does_not_carry_when_configured_then_refused(
    config: dict, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        CoordinatorConfig.model_validate(config)


def test_given_a_validation_and_a_probe_when_converted_then_they_round_trip() -> None:
    """A validation Round call (RoundCall.evaluation: its batches' heads, the federation's
    scores asked for) and its answers, and a probe, through the wire; a validation that also
    carries a training embed is refused."""
    rows = np.array([4, 0, 2])
    batch = EvalBatch(EmbedCall(11, "train", rows, b"d" * 32, False, (0, 2)), 5, "concat")
    # a batch the scorer is not called for: embedded, pushed nowhere (direct_many)
    only = EvalBatch(EmbedCall(12, "train", rows, b"e" * 32, False, (2,)), 4, embed_only=True)
    call = RoundCall(
        round_id=9,
        epoch=2,
        send_to=(0,),
        evaluation=Evaluation("train", 0, (batch, only), threshold=0.4, federation_scores=True),
        embed_wait_s=1.0,
    )
    peers = {0: PeerAddress("party0", "h:1")}
    got, _ = round_call_from_proto(round_call_to_proto(call, convert.header("r", "p"), peers))
    assert got.evaluation is not None and not got.probe
    assert (got.evaluation.split, got.evaluation.scorer, got.evaluation.threshold) == (
        "train",
        0,
        0.4,
    )
    b, o = got.evaluation.batches
    assert (b.first, b.embed.round_id, b.embed.blocks, b.embed.train) == (5, 11, (0, 2), False)
    assert b.head == "concat" and got.evaluation.federation_scores and not b.embed_only
    assert o.embed_only and (o.first, o.embed.round_id, o.embed.blocks) == (4, 12, (2,))
    np.testing.assert_array_equal(b.embed.rows, rows)
    score = ScoreResult(confusion={"0": np.eye(2, dtype=np.int64)})
    result = RoundResult(9, evaluated=(EvalAnswer(11, (0, 2), score), EvalAnswer(12, (0,))))
    back = round_result_from_proto(round_result_to_proto(result), round_id=9)
    assert [(a.request_id, a.present, a.score is None) for a in back.evaluated] == [
        (11, (0, 2), False),
        (12, (0,), True),
    ]
    assert back.evaluated[0].score is not None
    np.testing.assert_array_equal(back.evaluated[0].score.confusion["0"], np.eye(2))
    probe = RoundCall(round_id=0, epoch=0, send_to=(0,), probe=True, embed_wait_s=5.0)
    got, _ = round_call_from_proto(round_call_to_proto(probe, convert.header("r", "p"), peers))
    assert got.probe and got.send_to == (0,)
    answer = round_result_from_proto(
        round_result_to_proto(RoundResult(0, reached=(0,))), round_id=0
    )
    assert answer.reached == (0,)
    mixed = round_call_to_proto(
        replace(call, embed=EmbedCall(9, "train", rows, b"d" * 32, True, (0, 2))),
        convert.header("r", "p"),
        peers,
    )
    with pytest.raises(ProtocolError, match="validation carries no training"):
        round_call_from_proto(mixed)


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"faults": {"fail_rate": 0.1}}, "injected faults"),
        ({"train": {"method": "dvfl"}}, "steps of its own"),
        ({"train": {"staleness": 7}}, "--staleness above 5"),
        ({"pipeline": False}, "--no-pipeline"),
        ({"train": {"encrypt_relay": True}}, "--encrypt-relay"),
    ],
)
def test_given_what_only_the_relay_carries_when_auto_then_relay(config: dict, why: str) -> None:
    """`--data-plane auto` takes the relay, without a probe, for what the direct plane refuses."""
    cfg = CoordinatorConfig.model_validate(config)
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"data_plane": "auto"})})
    reason = relay_only(cfg)
    assert reason is not None and why in reason
    assert relay_only(CoordinatorConfig()) is None
