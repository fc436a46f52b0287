"""Issue 14 in one process: the rules behind the real-process tests of test_reliability_grpc.py."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from pathlib import Path

import grpc
import pytest
from harness import digits_parties
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_cli.coordinator_client import Evaluation
from vfl_cli.remote_cmd import render_evaluation
from vfl_client.runner import log_classes, register
from vfl_client.servicer import class_weights_refusal
from vfl_coordinator import runner
from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.registry import Registry
from vfl_core import lifecycle
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.label_summary import class_counts
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.inference.metrics import EvalReport, MetricRow
from vfl_core.protocol import PartyInfo, SamplePrediction
from vfl_core.training.engine import Federation
from vfl_core.training.faults import FaultConfig, FaultyTransport
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.liveness import FederationDown
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.status import FencedError, status_for
from vfl_wire.v1 import vfl_pb2


def test_given_balancing_run_when_class_weights_asked_then_train_split_only() -> None:
    assert class_weights_refusal("resample", "train") is None
    assert "only for the train split" in (class_weights_refusal("resample", "test") or "")
    assert "does not balance" in (class_weights_refusal("none", "train") or "")


def test_given_two_processes_of_one_party_when_registering_then_only_the_newest_lease_holds() -> (
    None
):
    registry = Registry(2)
    info = PartyInfo("party0", 0, 2, "digits", (16,), 10, True)
    _, first = registry.register(info, "10.0.0.1:1")
    assert registry.register(info, "10.0.0.1:1", lease=first) == ("alive", first)
    _, second = registry.register(info, "10.0.0.2:1")  # a new process: takes block 0 over
    assert second != first and registry.member(0).address == "10.0.0.2:1"
    with pytest.raises(FencedError, match="party0 registered again from another process"):
        registry.register(info, "10.0.0.1:1", lease=first)
    assert registry.member(0).address == "10.0.0.2:1"
    assert status_for(FencedError("x")) == grpc.StatusCode.ABORTED
    # a restarted coordinator knows no lease: the first process to come back keeps its own
    fresh = Registry(2)
    assert fresh.register(info, "10.0.0.2:1", lease=second)[1] == second
    with pytest.raises(FencedError):
        fresh.register(info, "10.0.0.1:1", lease=first)


def test_given_unreachable_coordinator_when_stopped_early_then_error_says_time_spent() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    info = PartyInfo("party0", 0, 2, "digits", (16,), 10, True)
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        register(address, info, ":1", timeout=300.0, stop=stop)
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert message.startswith(f"coordinator at {address} unreachable for ")
    assert "300s" not in message and "UNAVAILABLE" in message


def test_given_batches_answered_by_some_when_reporting_then_live_is_only_throughout() -> None:
    report = EvalReport()
    report.count_answers([0], [0])
    report.count_answers([1], [])  # block 1 missed the batch of its own samples
    report.count_answers([0, 1], [0, 1])  # and came back for this one
    report.count_answers([2], [])  # block 2 was down all along

    assert report.live_blocks() == [0]
    assert report.partly_live() == {1: (2, 1)}
    evaluation = Evaluation([MetricRow("0", 5), MetricRow("all", 5)], 3, [0], 0.5, report.answers)
    text = render_evaluation(evaluation, "test set")
    assert "(live blocks: 0; 0.50s)" in text
    assert "block 1 answered 1 of the 2 batches holding its samples" in text
    assert "block 2" not in text


def test_given_label_parties_that_count_classes_differently_when_registering_then_all_named() -> (
    None
):
    registry = Registry(3)
    registry.register(PartyInfo("bank", 0, 3, "tabular", (3,), 2, True), "127.0.0.1:1")
    registry.register(PartyInfo("shop", 1, 3, "tabular", (3,), 2, True), "127.0.0.1:2")
    with pytest.raises(ConfigError) as err:  # a stray label value: three classes
        registry.register(PartyInfo("ins", 2, 3, "tabular", (3,), 3, True), "127.0.0.1:3")
    message = str(err.value)
    assert message.startswith("party ins has num_classes=3 but parties bank and shop have 2")
    assert "a stray label value makes a class of its own" in message and "\n" not in message


def test_given_a_stray_label_value_when_preparing_then_classes_listed_and_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [f"c{i},{i % 7},{'yes' if i % 3 else 'no'}" for i in range(40)] + ["c40,1,yse"]
    table = tmp_path / "bank.csv"
    table.write_text("id,x,default\n" + "\n".join(rows) + "\n")
    argv = ["prepare", "--data", str(table), "--id-column", "id", "--label-column", "default"]
    argv += [
        "--block",
        "0",
        "--clients",
        "2",
        "--test-fraction",
        "0",
        "--out",
        str(tmp_path / "p"),
    ]
    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 0, result.output
    assert (
        "3 classes in the train split (rows per class): 0 ('no'): 14, 1 ('yes'): 26, 2 ('yse'): 1"
        in (result.stdout)
    )
    assert "warning: class 2 ('yse') has only 1 training row: a stray label value?" in result.stderr
    # and vfl-client says the same when it starts from the table or the directory
    data = load_party_dir(tmp_path / "p")
    with caplog.at_level(logging.INFO, logger="vfl_client.runner"):
        log_classes(data)
    assert "has only 1 training row" in caplog.text and "0 ('no'): 14" in caplog.text


def test_given_prediction_with_party_rows_when_sent_then_round_trip_and_bad_rows_refused() -> None:
    p = SamplePrediction(b"k", (0, 1), {}, None, -1, rows={0: 17, 1: 3})
    wire = vfl_pb2.PredictionRow.FromString(convert.prediction_to_proto(p).SerializeToString())
    assert convert.prediction_from_proto(wire).rows == {0: 17, 1: 3}
    wire.party_rows[1] = -2
    with pytest.raises(ProtocolError, match="negative block or row index"):
        convert.prediction_from_proto(wire)


def test_given_every_party_gone_as_training_ends_when_evaluating_then_waits_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator's final evaluation scores nothing while no label party answers: it tries
    again until one does (here: they come back after 0.5 s), and fails only if none does."""
    monkeypatch.setattr(lifecycle, "EVALUATE_AGAIN_S", 0.1)
    cfg = TrainConfig(seed=0, epochs=1, model=ModelConfig(representation="mlp", embed_dim=8))
    parties = digits_parties(tmp_path, 2, cfg, p_miss=0.1)
    faulty = FaultyTransport(
        InProcessTransport(parties), FaultConfig(at_inference=True, rejoin_rate=0.0), 0
    )
    fed = Federation(faulty, cfg, progress=False)
    fed.align()
    faulty.down.update(parties)  # every party gone when training ends
    config = CoordinatorConfig(out=tmp_path / "out", rejoin_timeout_s=20.0, train=cfg)
    config.out.mkdir()
    run = lifecycle._Run(fed, "coordinator", "run", config, None)
    threading.Timer(0.5, faulty.heal).start()
    start = time.monotonic()
    run.evaluate(None, True, config.rejoin_timeout_s)

    assert run.reports.get(None) is not None and run.reports[None].scored > 0
    assert 0.4 < time.monotonic() - start < 15
    faulty.down.update(parties)  # and for good: the run fails after the timeout
    run.config = CoordinatorConfig(out=tmp_path / "out", rejoin_timeout_s=0.5, train=cfg)
    with pytest.raises(FederationDown, match="scored no sample"):
        runner._conclude(run.evaluate(None, True, run.config.rejoin_timeout_s), config.out)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["status"] == "failed"


def test_given_a_party_down_as_training_ends_when_evaluating_then_the_table_says_whose_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The final test table with a party down is that of the others: warned, naming both."""
    cfg = TrainConfig(seed=0, epochs=1, model=ModelConfig(representation="mlp", embed_dim=8))
    parties = digits_parties(tmp_path, 3, cfg)
    faulty = FaultyTransport(
        InProcessTransport(parties), FaultConfig(at_inference=True, rejoin_rate=0.0), 0
    )
    fed = Federation(faulty, cfg, progress=False)
    fed.align()
    config = CoordinatorConfig(out=tmp_path / "out", train=cfg)
    run = lifecycle._Run(fed, "coordinator", "run", config, None)
    with caplog.at_level("WARNING"):
        run.evaluate(None, False, None)
    assert not [r for r in caplog.records if "ran without" in r.getMessage()]
    faulty.down.add(1)
    with caplog.at_level("WARNING"):
        report = lifecycle.evaluate_test(fed, None)
    assert report.scored > 0 and report.live_blocks() == [0, 2]
    said = [r.getMessage() for r in caplog.records if "ran without" in r.getMessage()]
    assert said == [
        "the test evaluation ran without block(s) 1 (down, or not answering every batch): its "
        "figures are those of block(s) 0, 2 alone, not the whole federation's "
        "(results.json: live_blocks)"
    ]
    # down when the test split was aligned again (after training, for a party back on other
    # rows): not in its alignment, yet registered and holding test samples, so named too
    caplog.clear()
    answering = faulty.id_hashes  # down: it does not answer the alignment either
    faulty.id_hashes = lambda split, blocks: {  # type: ignore[method-assign]
        b: h for b, h in answering(split, blocks).items() if b != 1
    }
    fed.align(("test",), retry_s=0.0)
    assert 1 not in fed.alignments["test"].rows
    with caplog.at_level("WARNING"):
        lifecycle.evaluate_test(fed, None)
    assert "the test evaluation ran without block(s) 1 (" in caplog.text


def test_given_few_labels_when_counting_classes_then_unlabelled_rows_are_not_a_class(
    tmp_path: Path,
) -> None:
    # vfl prepare --labels N writes the other training labels as UNLABELLED (-1): a label party
    # starting on such data listed its classes with np.bincount and died on the negative value.
    dirs = prepare_parties(
        load_digits_dataset(), tmp_path, 2, [0.0, 0.0], [0.0, 0.0], 0.2, seed=0, labels=30
    )
    data = load_party_dir(dirs[0])
    counts = class_counts(data)

    assert sum(c.rows for c in counts) == 30 and len(counts) == data.meta.num_classes
    # a method that learns from unlabelled rows keeps them (dvfl), so balancing must skip them
    train = TrainConfig(method="dvfl", balance="resample")
    weights = Party("p0", data, train, secret=b"s").class_weights("train")
    labels = data.splits["train"].labels
    assert weights is not None and (weights[labels == -1] == 0).all()
    assert (weights[labels >= 0] > 0).all()
