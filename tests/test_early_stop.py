"""Early stopping (TrainConfig.early_stop_patience, vfl_core/training/early_stop.py), in process.

A validation share of the training samples, drawn from the seed among those a label party holds,
leaves the batch plan and is scored after every epoch; training stops after `patience` epochs
without a better validation accuracy, and every party goes back to its state of the best epoch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import SECRET

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.party_dir import load_party_dir
from vfl_core.training.alignment import epoch_plan
from vfl_core.training.early_stop import EarlyStop
from vfl_core.training.engine import Callbacks, EpochSummary, Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

# A small model at a high learning rate: the validation accuracy peaks within a few epochs.
FAST = {"lr": 1e-2, "model": ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))}


def federation(party_dirs: list[Path], **train: object) -> tuple[Federation, dict[int, Party]]:
    config = TrainConfig.model_validate({"seed": 0, **FAST, **train})
    data = [load_party_dir(d) for d in party_dirs]
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, config, secret=SECRET.encode()) for d in data
    }
    return Federation(InProcessTransport(parties), config, progress=False), parties


def test_given_patience_when_validation_stops_improving_then_training_stops_and_best_is_restored(
    party_dirs: list[Path],
) -> None:
    epochs, patience = 12, 1
    # any gain restarts the wait here (the minimum improvement has its own tests below); the
    # watched Brier score improves through 12 epochs at FAST's rate, and turns within them at 0.1
    fed, parties = federation(
        party_dirs,
        epochs=epochs,
        early_stop_patience=patience,
        early_stop_min_improvement=0.0,
        lr=0.1,
    )
    after_epoch: list[dict[int, np.ndarray]] = []  # every party's weights after each epoch
    last_round: dict[int, int] = {}

    def record(_summary: EpochSummary) -> None:
        after_epoch.append({b: p.parameters_vector() for b, p in parties.items()})
        last_round.update({b: p.last_round for b, p in parties.items()})

    fed.observers.append(Callbacks(epoch=record))
    fed.align()
    summaries = fed.train()

    stop = fed.early_stop
    assert stop is not None and stop.stopped_epoch is not None, "ran every epoch"
    assert len(summaries) == len(after_epoch) == stop.stopped_epoch + 1 < epochs
    assert stop.best_epoch == stop.stopped_epoch - patience  # the epochs after it were no better
    assert stop.metric == "brier"  # a task of ten classes watches the Brier score
    scores = [a for _, a in stop.history]
    assert [e for e, _ in stop.history] == list(range(stop.stopped_epoch + 1))
    assert scores[stop.best_epoch] == stop.best_accuracy == min(scores)
    assert stop.kept == stop.restored == sorted(parties)
    for block, party in parties.items():
        # the final weights are the best epoch's, not the last epoch's
        np.testing.assert_array_equal(
            party.parameters_vector(), after_epoch[stop.best_epoch][block]
        )
        assert not np.array_equal(party.parameters_vector(), after_epoch[-1][block])
        assert party.last_round == last_round[block]  # later rounds still tell stale ones


def test_given_checkpoints_when_the_best_epoch_is_restored_then_the_last_checkpoint_holds_it(
    party_dirs: list[Path],
) -> None:
    """The end's checkpoint is what a party restarted while the coordinator serves loads: it
    must hold the best epoch's weights, even when the last round was checkpointed already
    (here every round is) before the parties went back to the best epoch."""
    fed, parties = federation(party_dirs, epochs=12, early_stop_patience=1)
    fed.checkpoint_every = 1
    saved: list[tuple[int, dict[int, np.ndarray]]] = []
    assert isinstance(fed.transport, InProcessTransport)
    fed.transport.saver = lambda p, r: saved.append((r, {p.block: p.parameters_vector()})) or True
    fed.align()
    fed.train()

    stop = fed.early_stop
    assert stop is not None and stop.restored == sorted(parties)
    last = fed.round_id - 1
    final = {b: v for r, one in saved if r == last for b, v in one.items()}
    for block, party in parties.items():
        latest = [one[block] for r, one in saved if block in one][-1]
        np.testing.assert_array_equal(latest, party.parameters_vector())  # the best epoch's
    assert sorted(final) == sorted(parties)


def test_given_patience_when_planned_then_the_validation_samples_never_train(
    party_dirs: list[Path],
) -> None:
    fed, _ = federation(party_dirs, epochs=1, early_stop_patience=2)
    fed.align()
    al = fed.alignments["train"]
    training, validation = fed._training, fed._validation
    assert training is not None and validation is not None
    assert np.intersect1d(training, validation).size == 0
    assert np.union1d(training, validation).size == len(al)
    scorable = sum(len(g) for g in al.groups().values())  # every party here holds labels
    assert len(validation) == round(0.1 * scorable)
    planned = np.concatenate([b.index for e in range(3) for b in fed.plan(e)])
    assert np.isin(planned, validation).sum() == 0
    assert np.sort(np.concatenate([b.index for b in fed.plan(0)])).tolist() == training.tolist()

    again, _ = federation(party_dirs, epochs=1, early_stop_patience=2)
    again.align()
    other, _ = federation(party_dirs, epochs=1, early_stop_patience=2, seed=1)
    other.align()
    assert np.array_equal(again._validation, validation)  # the seed fixes the held-out samples
    assert not np.array_equal(other._validation, validation)


def test_given_no_patience_when_planned_then_nothing_is_held_out(party_dirs: list[Path]) -> None:
    """The default (0) keeps every run as it was: the plan of the whole train alignment."""
    fed, _ = federation(party_dirs, epochs=1)
    fed.align()
    assert fed.early_stop is None and fed._training is None
    rows = len(fed.alignments["train"])
    want = epoch_plan(fed.alignments["train"], 0, 0, fed.config.batch_rows(rows, fed.tabular))
    got = fed.plan(0)
    assert [b.index.tolist() for b in got] == [b.index.tolist() for b in want]


def test_given_a_party_without_a_kept_state_when_restored_then_it_says_so(
    party_dirs: list[Path],
) -> None:
    _, parties = federation(party_dirs, epochs=1)
    party = parties[0]
    assert not party.restore_snapshot(5)  # nothing kept
    assert party.keep_snapshot(5)
    before = {k: v.clone() for k, v in party.f.state_dict().items()}
    with torch.no_grad():
        for p in party.f.parameters():
            p.add_(1.0)
    assert not party.restore_snapshot(6)  # kept of another round
    assert party.restore_snapshot(5)
    for key, value in party.f.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_given_a_saved_record_when_read_back_then_it_is_the_same() -> None:
    """The coordinator's checkpoint carries the record (Federation.snapshot)."""
    stop = EarlyStop(2, validation_samples=30)
    stop.observe(0, 0.5, 9)
    stop.observe(1, None, 19)  # nothing scored: no better
    assert EarlyStop.from_json(stop.to_json()) == stop
    assert stop.to_json()["history"] == [[1, 0.5], [2, None]]


def test_given_too_large_a_fraction_when_aligned_then_a_clear_error(party_dirs: list[Path]) -> None:
    from vfl_core.errors import ConfigError

    fed, _ = federation(party_dirs, epochs=1, early_stop_patience=1, validation_fraction=0.9999)
    with pytest.raises(ConfigError, match="no validation or no training sample"):
        fed.align()


def test_given_a_coordinator_checkpoint_when_resumed_then_the_best_epoch_so_far_is_kept(
    party_dirs: list[Path],
) -> None:
    """A restarted coordinator continues the record: the best epoch and the epochs waited."""
    from vfl_core.persistence.checkpoint import check_plain

    fed, _ = federation(party_dirs, epochs=3, early_stop_patience=2)
    fed.align()
    assert fed.early_stop is not None
    fed.early_stop.observe(0, 0.5, 22)  # the Brier score (lower is better)
    fed.early_stop.observe(1, 0.75, 45)
    saved = fed.snapshot()
    check_plain(saved)  # it goes into a torch.load(weights_only=True) checkpoint
    again, _ = federation(party_dirs, epochs=3, early_stop_patience=2)
    again.align()
    again.restore(saved)
    assert again.early_stop == fed.early_stop
    assert again.early_stop is not None and again.early_stop.waited == 1


def test_given_an_early_stop_record_when_written_then_epochs_count_from_1_and_read_back() -> None:
    stop = EarlyStop(patience=2, metric="brier")
    for epoch, value in enumerate([0.3, 0.2, 0.25, 0.26]):
        stop.observe(epoch, value, last_round=10 * epoch + 9)
    stop.stopped_epoch = 3
    saved = stop.to_json()
    assert saved["history"] == [[1, 0.3], [2, 0.2], [3, 0.25], [4, 0.26]]
    assert saved["best_epoch"] == 2 and saved["stopped_epoch"] == 4 and saved["epochs_from"] == 1
    again = EarlyStop.from_json(json.loads(json.dumps(saved)))
    assert (again.best_epoch, again.stopped_epoch, again.history) == (1, 3, stop.history)
    # a checkpoint written with 0-based best and stopped epochs is read as it was meant
    old = {k: v for k, v in saved.items() if k != "epochs_from"}
    old.update(best_epoch=1, stopped_epoch=3)
    assert (EarlyStop.from_json(old).best_epoch, EarlyStop.from_json(old).stopped_epoch) == (1, 3)
    assert EarlyStop(patience=2).to_json()["best_epoch"] is None  # nothing scored yet


def _watch(metric: str, values: list[float], min_improvement: float, patience: int) -> EarlyStop:
    """An EarlyStop fed `values` epoch by epoch until it is due."""
    stop = EarlyStop(patience, metric=metric, min_improvement=min_improvement)
    for epoch, value in enumerate(values):
        stop.observe(epoch, value, 10 * epoch + 9)
        if stop.due:
            stop.stopped_epoch = epoch
            break
    return stop


def test_given_tiny_gains_when_a_minimum_improvement_is_set_then_they_do_not_extend_training() -> (
    None
):
    """Brier scores that keep falling by 0.1 % an epoch: with a 1 % minimum the patience runs
    out 3 epochs after the first, and the best epoch (whose weights are restored) is still the
    last and smallest; with 0 every tiny gain resets it and training never stops."""
    brier = [0.1126 * (1 - 0.001 * e) for e in range(30)]
    stop = _watch("brier", brier, 0.01, 3)
    assert stop.stopped_epoch == 3 and stop.best_epoch == 3
    assert stop.reference == brier[0] and stop.best_value == brier[3]
    assert _watch("brier", brier, 0.0, 3).stopped_epoch is None


def test_given_a_large_gain_when_a_minimum_improvement_is_set_then_the_patience_restarts() -> None:
    rmse = [10.0, 9.95, 9.0, 8.99, 8.98, 8.97, 8.0]  # epoch 2 gains 10 %, then 0.1 % steps
    stop = _watch("rmse", rmse, 0.01, 3)
    assert stop.stopped_epoch == 5 and stop.reference == 9.0 and stop.best_epoch == 5
    accuracy = [0.70, 0.705, 0.72, 0.721, 0.722, 0.723]  # higher is better: the same rule
    stop = _watch("accuracy", accuracy, 0.01, 2)
    assert stop.stopped_epoch == 4 and stop.reference == 0.72 and stop.best_epoch == 4


def test_given_a_record_from_before_the_minimum_improvement_when_read_then_any_gain_counts() -> (
    None
):
    saved = EarlyStop(2, metric="brier").to_json()
    saved.pop("reference"), saved.pop("min_improvement")
    saved |= {"best_value": 0.2, "best_epoch": 0, "history": [[1, 0.2]]}
    stop = EarlyStop.from_json(saved)
    assert stop.min_improvement == 0.0 and stop.reference == 0.2
    assert stop.observe(1, 0.1999, 19) and stop.waited == 0


def test_given_min_epochs_when_the_patience_runs_out_early_then_training_goes_on_until_them() -> (
    None
):
    """A validation that stalls after epoch 1 and improves at epoch 12 (friedman's stale runs on
    VertiBench's grid): patience 8 alone stops after epoch 9 on the stalled value; with 16
    minimum epochs the run reaches the gain, and then stops when both the patience and the
    minimum allow."""
    rmse = [5.0, 3.5] + [3.52] * 10 + [2.6] + [2.61] * 20
    assert _watch("rmse", rmse, 0.01, 8).stopped_epoch == 9
    stop = EarlyStop(8, metric="rmse", min_improvement=0.01, min_epochs=16)
    for epoch, value in enumerate(rmse):
        stop.observe(epoch, value, 10 * epoch + 9)
        if stop.due:
            stop.stopped_epoch = epoch
            break
    assert stop.best_epoch == 12 and stop.stopped_epoch == 20  # 8 epochs after the gain
    # a run already past its minimum stops as the patience says; the record keeps the minimum
    assert EarlyStop.from_json(json.loads(json.dumps(stop.to_json()))).min_epochs == 16
    saved = stop.to_json()
    saved.pop("min_epochs")  # a checkpoint written before the minimum: none
    assert EarlyStop.from_json(saved).min_epochs == 0


def test_given_staleness_and_the_default_patience_then_sixteen_minimum_epochs() -> None:
    from vfl_core.config import AUTO_STALE_MIN_EPOCHS, AUTO_STALE_PATIENCE

    assert AUTO_STALE_MIN_EPOCHS == 2 * AUTO_STALE_PATIENCE == 16
    assert TrainConfig(staleness=5).min_epochs() == AUTO_STALE_MIN_EPOCHS
    assert TrainConfig(staleness=5, early_stop_patience=3).min_epochs() == 0  # patience given
    assert TrainConfig().min_epochs() == 0  # exact rounds
    assert TrainConfig(staleness=5, early_stop_min_epochs=4).min_epochs() == 4
