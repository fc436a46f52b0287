"""Early stopping with the verdict one epoch late (--overlap-validation,
vfl_core.training.late_validation): training stops one epoch after it would have, on the same
validation record, and the weights a run ends with are still exactly the best epoch's, also
where the copy kept was held before the epoch after it trained (`Party.hold_snapshot`,
`Party.keep_held`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_early_stop import federation

from vfl_core.training.engine import Callbacks, EpochSummary


def _train(party_dirs: list[Path], overlap: bool, patience: int) -> tuple:
    fed, parties = federation(
        party_dirs,
        epochs=12,
        early_stop_patience=patience,
        early_stop_min_improvement=0.0,
        overlap_validation=overlap,
        lr=0.1,  # the watched Brier score turns within 12 epochs (tests/test_early_stop.py)
    )
    after_epoch: list[dict[int, np.ndarray]] = []

    def record(_summary: EpochSummary) -> None:
        after_epoch.append({b: p.parameters_vector() for b, p in parties.items()})

    fed.observers.append(Callbacks(epoch=record))
    fed.align()
    fed.train()
    return fed.early_stop, parties, after_epoch


@pytest.mark.parametrize("patience", [1, 2])
def test_given_a_late_verdict_when_training_stops_then_one_epoch_more_and_the_best_restored(
    party_dirs: list[Path], patience: int
) -> None:
    now, _, _ = _train(party_dirs, overlap=False, patience=patience)
    stop, parties, after_epoch = _train(party_dirs, overlap=True, patience=patience)
    # the same figures and the same best epoch: the verdict on epoch e comes after e + 1,
    # which is then trained and discarded (patience 2: every epoch runs, the best not the last)
    assert stop.history == now.history and stop.best_epoch == now.best_epoch
    if now.stopped_epoch is None:
        assert stop.stopped_epoch is None and stop.best_epoch < len(after_epoch) - 1
    else:
        assert stop.stopped_epoch == now.stopped_epoch + 1 == len(after_epoch) - 1
    assert stop.kept == stop.restored == sorted(parties)
    for block, party in parties.items():
        np.testing.assert_array_equal(
            party.parameters_vector(), after_epoch[stop.best_epoch][block]
        )
        assert not np.array_equal(party.parameters_vector(), after_epoch[-1][block])


def test_given_a_held_copy_when_kept_after_later_rounds_then_restoring_goes_back_to_it(
    party_dirs: list[Path],
) -> None:
    """What the direct plane does at a best epoch whose verdict came late: each party held its
    state at the epoch's end, trained on, then kept the held copy; restoring goes back to the
    held state, not to the one the keep found."""
    fed, parties = federation(party_dirs, epochs=3)
    fed.align()
    fed.train_epoch(0)
    held = {b: p.parameters_vector() for b, p in parties.items()}
    for p in parties.values():
        p.hold_snapshot(7)
    fed.train_epoch(1)  # the epoch during which the verdict on epoch 0 travels
    for block, p in parties.items():
        assert not np.array_equal(p.parameters_vector(), held[block])
        assert not p.keep_held(6)  # not the round held: nothing kept
        assert p.kept_state(7) is None
        assert p.keep_snapshot(7)  # a keep call of the held round keeps the held copy
        assert p.kept_state(7) is not None
        assert p.restore_snapshot(7)
        np.testing.assert_array_equal(p.parameters_vector(), held[block])
