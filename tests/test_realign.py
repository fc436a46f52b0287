"""Issue 14, item 4 in one process: align() asks a party that holds samples but does not answer
again (for `align_retry_s`), and a party still missing joins the alignment at the start of an
epoch once it is heard from again. The real-process test is in test_reliability_grpc.py.

A party restarted on other rows (another data set, or its file grown) is aligned again too, at
the next epoch's start: in one process here, and with real processes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from harness import Cluster, prepare_digits

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.lifecycle import run_federation
from vfl_core.training import aligner
from vfl_core.training.engine import Callbacks, Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.v1 import vfl_pb2

K = 3


class Silent(InProcessTransport):
    """Block 1 does not answer its first `silent_for` alignment calls; `back` reports it."""

    def __init__(self, parties: dict[int, Party], silent_for: int) -> None:
        super().__init__(parties)
        self.silent_for = silent_for
        self.back: set[int] = set()

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        answers = super().id_hashes(split, blocks)
        if self.silent_for > 0:
            self.silent_for -= 1
            answers.pop(1, None)
        return answers

    def rejoined(self) -> set[int]:
        back, self.back = self.back, set()
        return back


@pytest.fixture(scope="module")
def datas(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    root = tmp_path_factory.mktemp("realign")
    paths = prepare_parties(load_digits_dataset(), root, K, [0.1] * K, [0.1] * K, 0.2, seed=0)
    return [load_party_dir(p) for p in paths]


def _federation(datas: list[PartyData], silent_for: int, retry_s: float):
    model = ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))
    cfg = TrainConfig(seed=0, epochs=3, batch_size=128, model=model)
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=b"s") for d in datas}
    transport = Silent(parties, silent_for)
    records: list[RoundRecord] = []
    fed = Federation(transport, cfg, progress=False, on_round=records.append, align_retry_s=retry_s)
    return transport, fed, records


def test_given_party_silent_for_two_attempts_when_aligning_then_asked_again_and_aligned(
    datas: list[PartyData], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aligner, "ALIGN_RETRY_PAUSE_S", 0.05)
    transport, fed, _ = _federation(datas, silent_for=2, retry_s=10.0)
    fed.align(("train",))
    assert sorted(fed.alignments["train"].rows) == [0, 1, 2] and not fed.unaligned
    assert transport.silent_for == 0


def test_given_party_silent_through_alignment_when_heard_again_then_joins_next_epoch(
    datas: list[PartyData],
) -> None:
    transport, fed, records = _federation(datas, silent_for=2, retry_s=0.0)
    fed.align()
    assert fed.unaligned == {1} and 1 not in fed.alignments["train"].rows

    def on_round(record: RoundRecord) -> None:
        records.append(record)
        if len(records) == 3:  # during epoch 1 the party is heard from again
            transport.back.add(1)

    fed.observers[:] = [Callbacks(round=on_round)]
    summaries = fed.train()

    first = summaries[0].rounds
    assert all(1 not in r.pattern for r in records[:first])  # epoch 1 keeps its plan
    assert any(1 in r.present for r in records[first:])  # later epochs include the party
    assert not fed.unaligned and sorted(fed.alignments["train"].rows) == [0, 1, 2]


def test_given_party_back_on_other_rows_when_training_then_aligned_again_next_epoch(
    datas: list[PartyData], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    transport, fed, records = _federation(datas, silent_for=0, retry_s=0.0)
    fed.align()
    paths = prepare_parties(load_digits_dataset(), tmp_path, K, [0.4] * K, [0.4] * K, 0.2, seed=5)
    other = load_party_dir(paths[1])  # block 1 of another split of the data: other rows
    assert other.meta.block == 1 and len(other.splits["train"]) != len(datas[1].splits["train"])

    def on_round(record: RoundRecord) -> None:
        records.append(record)
        if len(records) == 3:  # block 1 restarts on the other rows during epoch 1
            transport.parties[1] = Party("party1", other, fed.config, secret=b"s")
            transport.back.add(1)

    fed.observers[:] = [Callbacks(round=on_round)]
    with caplog.at_level("WARNING"):
        summaries = fed.train()

    said = [r.getMessage() for r in caplog.records if "holding other rows" in r.getMessage()]
    train = f"train {len(datas[1].splits['train'])} -> {len(other.splits['train'])}"
    assert len(said) == 1 and train in said[0], said
    rows = fed.alignments["train"].rows[1]
    assert int((rows >= 0).sum()) == len(other.splits["train"])  # the plan holds the new rows
    first = summaries[0].rounds
    assert any(1 in r.present for r in records[first:])  # and block 1 trains on them


def test_given_party_back_on_other_rows_in_last_epoch_when_run_ends_then_test_has_its_rows(
    datas: list[PartyData], tmp_path: Path
) -> None:
    """Back during the last epoch, no epoch start is left to align it again: the run's end does,
    before the test table (else the table left it out, or it refused its old rows)."""
    transport, fed, _ = _federation(datas, silent_for=0, retry_s=0.0)
    paths = prepare_parties(load_digits_dataset(), tmp_path, K, [0.4] * K, [0.4] * K, 0.2, seed=5)
    other = load_party_dir(paths[1])
    rounds: list[RoundRecord] = []

    def on_round(record: RoundRecord) -> None:
        rounds.append(record)
        if record.epoch == 2 and rounds[-2].epoch == 1:  # epoch 3 of 3 begins
            transport.parties[1] = Party("party1", other, fed.config, secret=b"s")
            transport.back.add(1)

    results = run_federation(
        transport,
        fed.config,
        config=fed.config,
        kind="simulate",
        run_id="last-epoch",
        observers=[Callbacks(round=on_round)],
        align_retry_s=0.0,
    )

    assert results.failure is None
    report = results.reports[None]
    assert 1 in report.live_blocks() and report.unscored == 0  # it answered every test batch
    assert sum(s.samples for p, s in report.by_pattern.items() if 1 in p) > 0


@pytest.mark.slow
def test_given_client_restarted_on_other_data_when_training_then_it_trains_and_is_evaluated(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Back on other rows during training, then (while the coordinator serves) on the first
    rows again: aligned again at the next epoch's start, then before the next evaluation."""
    base = tmp_path_factory.getbasetemp()
    parties = prepare_digits(base, p_miss=0.1, seed=0, clients=2)
    other = prepare_digits(base, p_miss=0.3, seed=7, clients=2)
    ckpt = base / "realign-ckpt"  # a party restarted after training restores its weights
    coord, clients = cluster.federation(
        parties,
        epochs=6,
        serve=True,
        extra=["--batch-size", "16", "--checkpoint-dir", str(ckpt / "coordinator")],
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt / d.name)],
    )
    cluster.wait_rounds(coord, 40, 120)
    for client in clients:  # both gone: training pauses (no label party) until they are back
        client.signal(signal.SIGKILL)
        client.wait(10)
    # block 1 back first, on another data set: said while training waits for a label party
    back = cluster.restart(clients[1], ["--data", str(other[1])])
    said = "block 1 (party1) registered again holding other rows ("
    cluster.wait_for(lambda: coord.log().count(said) == 1, 120, "block 1 said back on other rows")
    cluster.restart(clients[0])
    cluster.wait_serving(coord, 240)
    assert "epoch 2: aligned again; blocks [] joined, [1] on their new rows" in coord.log()
    results = coord.results()
    assert results is not None and results["status"] == "ok"
    observed = {row["observed"] for row in results["test"]["rows"]}
    assert "0,1" in observed and "1" in observed  # block 1 predicted its new test rows

    back.signal(signal.SIGKILL)
    back.wait(10)
    joined = "party party1 synchronised"
    before = coord.log().count(joined)
    cluster.restart(back, ["--data", str(parties[1])])  # and back on its first rows
    cluster.wait_for(lambda: coord.log().count(joined) > before, 120, "block 1 registered")
    header = convert.header("", "")
    report = cluster.stub(coord).Evaluate(
        vfl_pb2.EvaluateRequest(header=header, split="test"), timeout=60
    )
    assert "serving: aligned again; blocks [] joined, [1] on their new rows" in coord.log()
    assert 1 in report.live_blocks
    assert {"0,1", "1"} <= {row.observed for row in report.rows}
