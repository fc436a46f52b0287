"""The per-epoch run log (vfl_core.persistence.run_log): one JSON line per epoch, cut and appended
on resume,
TensorBoard scalars when tensorboard is installed, and the engine's per-head epoch losses."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import time
from copy import deepcopy
from pathlib import Path

import numpy as np
import pytest

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.inference.metrics import MetricRow
from vfl_core.persistence.run_log import EPOCHS_FILE, RunLog, liveness_record, read_epochs
from vfl_core.training.engine import Callbacks, Cursor, EpochSummary, Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.liveness import Liveness
from vfl_core.training.party import Party

K = 4
SECRET = b"run-log-test"
# the module the run log writes TensorBoard events with: None in sys.modules makes its import fail
NO_BOARD = "tensorboard.summary.writer.event_file_writer"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def summary(epoch: int) -> EpochSummary:
    return EpochSummary(
        epoch=epoch,
        rounds=10,
        mean_loss=2.0 - 0.1 * epoch,
        seconds=0.5,
        incomplete_rounds=epoch % 2,
        head_losses={0: 1.9 - 0.1 * epoch, 1: 2.1 - 0.1 * epoch},
    )


def liveness() -> Liveness:
    live = Liveness([0, 1, 2], down_after=1)
    live.failed(2, 5, "embed")
    return live


def lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_given_three_epochs_when_logged_then_one_json_line_each_with_losses_and_liveness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, NO_BOARD, None)  # JSON lines only
    test = MetricRow("all", 30, 0.75, 0.8, 0.7)
    with RunLog(tmp_path) as run_log:
        for epoch in range(3):
            run_log.write(liveness_record(summary(epoch), liveness(), test if epoch == 2 else None))
    records = lines(tmp_path / EPOCHS_FILE)
    assert [r["epoch"] for r in records] == [0, 1, 2]
    first = records[0]
    assert first["rounds"] == 10 and first["seconds"] == 0.5 and first["mean_loss"] == 2.0
    assert first["head_losses"] == {"0": 1.9, "1": 2.1}
    assert first["parties"] == {"up": 2, "down": 1, "rejoining": 0}
    assert first["transitions"] == {"up->down": 1}
    assert "test" not in first and "test" not in records[1]
    assert records[2]["test"] == {
        "samples": 30,
        "accuracy": 0.75,
        "federation_accuracy": 0.8,
        "f1": 0.7,
    }
    assert not (tmp_path / "tensorboard").exists()


def test_given_regression_metrics_when_logged_then_the_errors_not_accuracy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, NO_BOARD, None)
    test = MetricRow("all", 88, rmse=61.2, mae=52.3, r2=0.37, federation_rmse=60.5)
    with RunLog(tmp_path) as run_log:
        run_log.write(liveness_record(summary(0), liveness(), test))
    logged = lines(tmp_path / EPOCHS_FILE)[0]["test"]
    assert logged == {"samples": 88, "rmse": 61.2, "mae": 52.3, "r2": 0.37, "federation_rmse": 60.5}


def test_given_log_of_a_crashed_run_when_resumed_then_later_epochs_cut_and_new_ones_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, NO_BOARD, None)
    with RunLog(tmp_path) as run_log:
        for epoch in range(4):
            run_log.write(liveness_record(summary(epoch), liveness()))
    with (tmp_path / EPOCHS_FILE).open("a") as f:
        f.write('{"epoch": 4, "rounds"')  # the crash cut the last line short
    # The checkpoint was taken inside epoch 2: epochs 2 and 3 run again.
    with RunLog(tmp_path, first_epoch=2) as run_log:
        assert [r["epoch"] for r in read_epochs(tmp_path / EPOCHS_FILE)] == [0, 1]
        for epoch in range(2, 5):
            run_log.write(liveness_record(summary(epoch), liveness()))
    assert [r["epoch"] for r in lines(tmp_path / EPOCHS_FILE)] == [0, 1, 2, 3, 4]
    # A fresh run (first epoch 0) starts the file over.
    with RunLog(tmp_path) as run_log:
        run_log.write(liveness_record(summary(0), liveness()))
    assert [r["epoch"] for r in lines(tmp_path / EPOCHS_FILE)] == [0]


def test_given_no_tensorboard_when_logging_then_debug_message_once_and_json_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, NO_BOARD, None)  # import raises
    with (
        caplog.at_level(logging.DEBUG, logger="vfl_core.persistence.run_log"),
        RunLog(tmp_path) as run_log,
    ):
        for epoch in range(2):
            run_log.write(liveness_record(summary(epoch), liveness()))
    notes = [r for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.DEBUG
    assert len(lines(tmp_path / EPOCHS_FILE)) == 2


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed"
)
def test_given_tensorboard_when_logging_then_event_file_holds_the_epoch_scalars(
    tmp_path: Path,
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    regression = MetricRow("all", 88, rmse=61.2, mae=52.3, r2=0.37)  # no federation RMSE
    with RunLog(tmp_path) as run_log:
        for epoch in range(3):
            test = regression if epoch == 2 else None
            run_log.write(liveness_record(summary(epoch), liveness(), test))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    loss = events.Scalars("loss/mean")
    assert [e.step for e in loss] == [0, 1, 2]
    assert [e.value for e in loss] == pytest.approx([2.0, 1.9, 1.8])
    assert [e.value for e in events.Scalars("loss/head1")] == pytest.approx([2.1, 2.0, 1.9])
    assert [e.value for e in events.Scalars("parties/down")] == [1, 1, 1]
    tests = {t for t in events.Tags()["scalars"] if t.startswith("test/")}
    assert tests == {"test/rmse", "test/mae", "test/r2"}  # the task's metrics that it has
    assert [(e.step, e.value) for e in events.Scalars("test/rmse")] == [(2, pytest.approx(61.2))]


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed"
)
def test_given_a_resumed_run_when_logged_then_tensorboard_shows_each_epoch_once(
    tmp_path: Path,
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunLog(tmp_path) as run_log:
        for epoch in range(4):
            run_log.write(liveness_record(summary(epoch), liveness()))
    # TensorBoard reads event files in name order: the time in whole seconds, then a counter of
    # this process that goes from 9 to 10 as text. A resumed run is a later process; here,
    # the next second gives the second file the later name.
    time.sleep(1.01 - time.time() % 1)
    with RunLog(tmp_path, first_epoch=2) as run_log:  # epochs 2 and 3 run again
        for epoch in range(2, 4):
            run_log.write(liveness_record(summary(epoch), liveness()))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss/mean")] == [0, 1, 2, 3]


# ------------------------------------------------------------------ attached to a federation


@pytest.fixture(scope="module")
def parties_data(tmp_path_factory: pytest.TempPathFactory) -> list:
    root = tmp_path_factory.mktemp("runlog")
    paths = prepare_parties(load_digits_dataset(), root, K, [0.1] * K, [0.1] * K, 0.2, seed=0)
    return [load_party_dir(p) for p in paths]


def federation(datas: list, epochs: int, records: list[RoundRecord]) -> Federation:
    cfg = TrainConfig(
        seed=0,
        epochs=epochs,
        batch_size=128,
        model=ModelConfig(representation="mlp", embed_dim=4, hidden=(8,)),
    )
    parties = {d.meta.block: Party(f"p{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    fed = Federation(InProcessTransport(parties), cfg, progress=False, on_round=records.append)
    return fed


def test_given_federation_without_eval_every_when_training_then_lines_have_no_test_metrics(
    tmp_path: Path, parties_data: list
) -> None:
    fed = federation(parties_data, 2, [])
    with RunLog(tmp_path) as run_log:
        fed.observers.append(run_log)
        fed.align()
        fed.train()
    logged = read_epochs(tmp_path / EPOCHS_FILE)
    assert [r["epoch"] for r in logged] == [0, 1]
    assert not any("test" in r for r in logged)
    assert fed.request_id == 0  # nothing was evaluated


def test_given_federation_with_eval_every_when_training_then_lines_match_rounds_and_evaluation(
    tmp_path: Path, parties_data: list
) -> None:
    records: list[RoundRecord] = []
    fed = federation(parties_data, 3, records)
    with RunLog(tmp_path, eval_every=2) as run_log:
        fed.observers.append(run_log)
        fed.align()
        fed.train()
    logged = read_epochs(tmp_path / EPOCHS_FILE)
    assert [r["epoch"] for r in logged] == [0, 1, 2]
    for line in logged:
        rounds = [r for r in records if r.epoch == line["epoch"]]
        assert line["rounds"] == len(rounds)
        for head in range(K):
            losses = [r.losses[head] for r in rounds if head in r.losses]
            assert line["head_losses"][str(head)] == pytest.approx(float(np.mean(losses)))
        all_losses = [v for r in rounds for v in r.losses.values()]
        assert line["mean_loss"] == pytest.approx(float(np.mean(all_losses)))
        assert line["parties"] == {"up": K, "down": 0, "rejoining": 0}
    # evaluated after epoch 2 (every 2) and after the last one; the last equals a new evaluation
    assert ["test" in r for r in logged] == [False, True, True]
    final = fed.evaluate("test").overall()
    assert logged[2]["test"]["accuracy"] == pytest.approx(final.accuracy)
    assert logged[2]["test"]["samples"] == final.samples == len(fed.alignments["test"])


def test_given_checkpoint_mid_epoch_when_restored_then_per_head_losses_continue(
    parties_data: list,
) -> None:
    records: list[RoundRecord] = []
    fed = federation(parties_data, 2, records)
    snaps: list[tuple[dict, Cursor]] = []
    fed.checkpoint_every = 5  # the in-process transport without a saver: only our snapshot
    fed.observers.append(
        Callbacks(checkpoint=lambda _r, _s: snaps.append((fed.snapshot(), deepcopy(fed.cursor))))
    )
    fed.align()
    fed.train()
    saved, cursor = next((s, c) for s, c in snaps if c.epoch == 1 and c.position > 0)
    assert cursor.head_losses.keys() == set(range(K))
    other = federation(parties_data, 2, [])
    other.align()
    other.restore(saved)
    assert other.cursor.head_losses == cursor.head_losses
    assert other.cursor.summaries == cursor.summaries
    assert other.cursor.summaries[0].head_losses.keys() == set(range(K))
    # a checkpoint written before per-head losses existed still restores
    old = {k: v for k, v in saved.items() if k != "head_losses"}
    old["summaries"] = [
        {k: v for k, v in s.items() if k != "head_losses"} for s in saved["summaries"]
    ]
    other.restore(old)
    assert other.cursor.head_losses == {} and other.cursor.summaries[0].head_losses == {}
    assert other.cursor.position == cursor.position
