"""The next epoch sent ahead on the direct plane with --staleness and --overlap-validation
(vfl_core.training.direct_stale, round_loop): at an epoch's end the coordinator sends the next
epoch's first block (carrying the steps still due to each party), the validation after it and
the rest of the next epoch's first rounds before its last rounds are back. In one process,
with the threaded test transport of tests/test_direct_plane.py: the same numbers as the
in-process federation, on that schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from test_direct_plane import K, MemoryLinks, ThreadedDirect, _train

from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ProtocolError
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.protocol import EmbedCall, EvalBatch, Evaluation, RoundCall, RoundResult, Step
from vfl_core.training import late_validation
from vfl_core.training.direct_eval_party import run_call
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.convert_direct import PeerAddress, round_call_from_proto, round_call_to_proto

EPOCHS = 4
WAIT_S = 30.0  # nothing is lost here: a late push is a loaded machine's


class Recording(ThreadedDirect):
    """ThreadedDirect whose parties run validations too (run_call), recording for each batch of
    calls how many batches before it had been collected when it left."""

    def __init__(self, parties: dict[int, Party]) -> None:
        super().__init__(parties)
        self.collected: list[int] = []  # per batch of calls: the batches collected before it
        self.done: set[int] = set()

    def direct(self, calls: dict[int, RoundCall]) -> Callable[[], dict[int, RoundResult]]:
        index = len(self.calls)
        self.calls.append(calls)
        self.collected.append(len(self.done))
        waits = {"embed_wait_s": WAIT_S, "grad_wait_s": 2 * WAIT_S}
        futures = {
            b: self.workers[b].submit(
                run_call, self.parties[b], replace(c, **waits), MemoryLinks(b, self)
            )
            for b, c in calls.items()
        }

        def collect() -> dict[int, RoundResult]:
            self.done.add(index)
            return {b: f.result() for b, f in futures.items()}

        return collect


def _parties(base: Path, train: TrainConfig) -> dict[int, Party]:
    """Digits in three blocks, the labels at block 0 only (the validation on the direct plane)."""
    paths = prepare_parties(
        load_digits_dataset(), base, K, [0.1] * K, [0.1] * K, 0.2, seed=0, label_blocks=[0]
    )
    data = [load_party_dir(p) for p in paths]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}


def _same_as_in_process(tmp_path: Path, train: TrainConfig) -> tuple[Recording, list]:
    """Train `train` in process and through a recording transport (the direct plane's
    schedule), assert the two equal (records, validation history, weights); the recording and
    the records."""
    relay = _parties(tmp_path / "a", train)
    want, want_history = _flow_train(relay, InProcessTransport(relay), train)
    direct = _parties(tmp_path / "b", train)
    transport = Recording(direct)
    got, got_history = _flow_train(direct, transport, train)

    assert [r.to_json() for r in got] == [r.to_json() for r in want]
    assert got_history == want_history and len(want_history) == EPOCHS
    for block, party in relay.items():
        np.testing.assert_array_equal(direct[block].parameters_vector(), party.parameters_vector())
    return transport, want


def _validations(transport: Recording) -> list[int]:
    """The indices of the recorded call groups that carry a validation."""
    return [
        i
        for i, calls in enumerate(transport.calls)
        if any(c.evaluation is not None and c.evaluation.split == "train" for c in calls.values())
    ]


def _first_block(transport: Recording, i: int, last: int) -> tuple[dict[int, list[RoundCall]], int]:
    """The calls of the next epoch's first block recorded before the validation at index `i`
    (of the epoch ending at round `last`), by party, and the index of the call group before
    them."""
    firsts: dict[int, list[RoundCall]] = {}
    j = i - 1
    while next(iter(transport.calls[j].values())).round_id > last:
        for b, c in transport.calls[j].items():
            firsts.setdefault(b, []).append(c)
        j -= 1
    return firsts, j


def test_given_overlapped_validation_when_an_epoch_ends_then_the_next_goes_ahead_bit_identically(
    tmp_path: Path,
) -> None:
    """--overlap-validation with --staleness: at each epoch's end but the last the next epoch's
    first block leaves first, its calls carrying all the steps still due to the parties, then
    the validation (a head validating with the heads it held before that block's first fuse),
    then the rest of the next epoch: the numbers of the in-process federation, validation
    figures included."""
    train = TrainConfig(
        seed=0, epochs=EPOCHS, data_plane="direct", staleness=3, overlap_validation=True,
        early_stop_patience=EPOCHS, batch_size=256,
    )  # fmt: skip
    transport, _ = _same_as_in_process(tmp_path, train)

    # the schedule: each validation but the last epoch's leaves after the next epoch's first
    # block, whose calls carried every step still due to the parties they call (the validation
    # only those of a party that block did not call), and before that first block's calls were
    # collected; a head held its heads in that block
    validations = _validations(transport)
    ahead = [
        i for i in validations if next(iter(transport.calls[i - 1].values())).round_id
        > next(iter(transport.calls[i].values())).round_id
    ]  # fmt: skip
    assert len(ahead) == EPOCHS - 1, (validations, ahead)
    for i in ahead:
        calls = transport.calls[i]
        last = next(iter(calls.values())).round_id
        firsts, j = _first_block(transport, i, last)
        assert transport.collected[i] <= j + 1  # left before the first block was collected
        assert all(c.after > last for b, c in calls.items() if b in firsts)
        assert not any(calls[b].steps_before for b in firsts.keys() & calls.keys())
        held = [c for cs in firsts.values() for c in cs if c.hold_heads]
        assert held and all(c.fuse is not None for c in held)
        carried = [s.round_id for cs in firsts.values() for c in cs for s in c.steps_before]
        assert last in carried and all(q <= last for q in carried)  # the epoch's last round too
        following = transport.calls[i + 1]
        assert any(c.embed is not None and c.after_validation for c in following.values())
    drains = [c for calls in transport.calls for c in calls.values() if c.steps_after]
    assert len(drains) <= K  # only the last epoch's end drains with steps-only calls


def _flow_train(parties: dict[int, Party], transport, train: TrainConfig) -> tuple[list, list]:
    """_train, and the validation record (epoch, figure) early stopping kept."""
    records: list[RoundRecord] = []
    fed = Federation(transport, train, progress=False, on_round=records.append)
    fed.align()
    fed.train()
    assert fed.early_stop is not None
    return records, list(fed.early_stop.history)


def test_given_epoch_flow_when_the_blocks_run_on_then_bit_identical_to_the_in_process_engine(
    tmp_path: Path,
) -> None:
    """--epoch-flow: each epoch's first block is embedded before the last block of the epoch
    before is stepped, and each party validates at its own epoch's end (a head with the heads
    it held before the next epoch's first fuse). The direct plane computes what the in-process
    federation does, validation figures and weights included; without the option the math
    differs (the first block misses the last one's updates)."""
    train = TrainConfig(
        seed=0, epochs=EPOCHS, data_plane="direct", staleness=3, overlap_validation=True,
        epoch_flow=True, early_stop_patience=EPOCHS, batch_size=256,
    )  # fmt: skip
    transport, want = _same_as_in_process(tmp_path, train)

    # the schedule: each validation but the last epoch's leaves after the next epoch's first
    # block (whose calls carried the steps of the block before the last) and carries the last
    # block's steps; a head held its heads in that first block
    validations = _validations(transport)
    ahead = [i for i in validations if any(c.steps_before for c in transport.calls[i].values())]
    assert len(ahead) == EPOCHS - 1, (validations, ahead)
    for i in ahead:
        calls = transport.calls[i]
        last = next(iter(calls.values())).round_id
        before = transport.calls[i - 1]
        assert all(c.round_id > last and c.embed is not None for c in before.values())
        # after each party's last call: the next epoch's first rounds, where it was in them
        assert all(c.after >= 0 for c in calls.values())
        assert any(c.after > last for c in calls.values())
        firsts, _ = _first_block(transport, i, last)
        held = [c for cs in firsts.values() for c in cs if c.hold_heads]
        assert held and all(c.fuse is not None for c in held)
        carried = [s for cs in firsts.values() for c in cs for s in c.steps_before]
        assert carried and all(s.round_id <= last and s.epoch is not None for s in carried)
        # S = 3, p = 2: the first block steps the rounds up to the last two, the validation
        # those two (a first round misses at most S rounds' updates); a party not called in
        # the first block steps the earlier ones there too
        assert all(s.round_id <= last - 2 for s in carried)
        validated = [
            s.round_id for b in firsts.keys() & calls.keys() for s in calls[b].steps_before
        ]
        assert validated and all(last - 2 < q <= last for q in validated)

    plain = _parties(tmp_path / "c", train)
    drained, _ = _flow_train(
        plain, InProcessTransport(plain), train.model_copy(update={"epoch_flow": False})
    )
    assert [r.to_json() for r in drained] != [r.to_json() for r in want]


def test_given_weight_average_when_the_blocks_run_on_then_bit_identical_to_the_in_process_engine(
    tmp_path: Path,
) -> None:
    """--weight-average ema with --epoch-flow and --fresh-own-tower: every validation scores
    the parties' averaged weights as of each party's own epoch's end (a head's averages held
    with its heads before the next epoch's first fuse), on the direct plane's schedule as in
    the in-process federation: the same validation figures, records and weights."""
    train = TrainConfig(
        seed=0, epochs=EPOCHS, data_plane="direct", staleness=3, overlap_validation=True,
        epoch_flow=True, fresh_own_tower=True, early_stop_patience=EPOCHS, batch_size=256,
        weight_average="ema",
    )  # fmt: skip
    _same_as_in_process(tmp_path, train)


def test_given_epoch_flow_when_no_validation_goes_direct_then_the_last_steps_go_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the validation finds no way over the direct plane once the next epoch's first
    block left (its scorer gone), the epoch's last steps go in its place, in calls of no
    batch, and the validation is scored at the epoch's end: training itself unchanged."""
    train = TrainConfig(
        seed=0, epochs=3, data_plane="direct", staleness=3, overlap_validation=True,
        epoch_flow=True, early_stop_patience=3, batch_size=256,
    )  # fmt: skip
    relay = _parties(tmp_path / "a", train)
    want, _ = _flow_train(relay, InProcessTransport(relay), train)
    monkeypatch.setattr(late_validation.direct_eval, "start", lambda *a, **k: None)
    direct = _parties(tmp_path / "b", train)
    transport = Recording(direct)
    got, history = _flow_train(direct, transport, train)

    assert [r.to_json() for r in got] == [r.to_json() for r in want]
    for block, party in relay.items():
        np.testing.assert_array_equal(direct[block].parameters_vector(), party.parameters_vector())
    alone = [
        c
        for calls in transport.calls
        for c in calls.values()
        if c.evaluation is not None and not c.evaluation.batches
    ]
    assert alone and all(c.steps_before for c in alone)
    assert len(history) == 3  # each epoch scored, at its end


@pytest.fixture
def two_torch_threads() -> Iterator[None]:
    """Two intra-op threads on the calling thread, where the in-process federation runs (the
    test session's setting is one), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("two_torch_threads")
def test_given_the_callers_torch_threads_when_the_parties_run_on_workers_then_bit_identical(
    tmp_path: Path,
) -> None:
    """The threaded transport's parties compute at the torch thread count of the caller, whose
    in-process federation is the reference: at another count a matmul adds up in another
    order, the head's first step already differs by an ulp, and with --staleness 1, the next
    epoch sent ahead and the auto batch a loss differs from round 27 on (the harness, not the
    direct plane: the workers were pinned to one thread while the caller ran at two)."""
    train = TrainConfig(
        seed=0, epochs=2, data_plane="direct", staleness=1, overlap_validation=True,
        early_stop_patience=2,
    )  # fmt: skip
    relay = _parties(tmp_path / "a", train)
    want = _train(relay, InProcessTransport(relay), train)
    direct = _parties(tmp_path / "b", train)
    transport = Recording(direct)
    got = _train(direct, transport, train)

    assert len(want) > 27  # past the round that differed
    # the epoch's end went ahead: the next epoch's first calls carried the steps still due,
    # its head holding its heads for the validation that followed them
    calls = [c for calls in transport.calls for c in calls.values()]
    assert any(c.hold_heads and c.steps_before for c in calls)
    assert [r.to_json() for r in got] == [r.to_json() for r in want]
    for block, party in relay.items():
        np.testing.assert_array_equal(direct[block].parameters_vector(), party.parameters_vector())
    seen = {b: w.submit(torch.get_num_threads).result() for b, w in transport.workers.items()}
    assert seen == dict.fromkeys(direct, 2)


def test_given_a_validation_carrying_due_steps_when_converted_then_kept_and_others_refused() -> (
    None
):
    """The validation sent ahead carries the steps still due before it (`steps_before`), which
    the wire keeps; steps after it, or a deferred step, stay refused."""
    batch = EvalBatch(EmbedCall(11, "train", np.array([4, 0]), b"d" * 32, False, (0, 1)), 5)
    call = RoundCall(
        round_id=9,
        epoch=2,
        send_to=(0,),
        after=9,
        evaluation=Evaluation("train", 0, (batch,), hold=True),
        steps_before=(Step(8, (0,)), Step(9, (0,))),
    )
    header, peers = convert.header("r", "p"), {0: PeerAddress("party0", "h:1")}
    got, _ = round_call_from_proto(round_call_to_proto(call, header, peers))
    assert got.evaluation is not None and (got.after, got.steps_before) == (9, call.steps_before)
    for bad in (replace(call, steps_after=(Step(9, (0,)),)), replace(call, defer_step=True)):
        with pytest.raises(ProtocolError, match="only the steps before it"):
            round_call_from_proto(round_call_to_proto(bad, header, peers))
