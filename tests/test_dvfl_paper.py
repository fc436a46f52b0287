"""DVFL's few-label and period settings as the DVFL paper ran them (issue 30): the owner's early
stopping (up to owner_epochs, best epoch restored) and the communication period in guest epochs
(Fig. 3/4)."""

from __future__ import annotations

import numpy as np
import pytest
from test_dvfl import K, config, federation, weights

from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.methods.dvfl.owner_stop import OwnerStop

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    """Digits with 30% of each party's blocks missing, labels at block 0 (test_dvfl's data)."""
    root = tmp_path_factory.mktemp("dvfl-paper")
    paths = prepare_parties(
        load_digits_dataset(), root, K, [0.3] * K, [0.3] * K, 0.2, seed=0, label_blocks=[0]
    )
    return [load_party_dir(p) for p in paths]


def test_owner_stop_keeps_the_best_epoch_and_stops_after_patience() -> None:
    import torch

    net = torch.nn.Linear(2, 2)
    stop = OwnerStop(patience=2, fraction=0.25, seed=0)
    train = stop.split(np.arange(8))
    assert stop.validation is not None and len(stop.validation) == 2
    assert len(train) == 6 and not set(train) & set(stop.validation.tolist())
    for epoch, accuracy in enumerate([0.5, 0.8, 0.7]):
        with torch.no_grad():
            net.weight.fill_(float(epoch))  # the weights of each epoch, told apart
        stop.after_epoch(net, epoch, accuracy, last=False)
    assert not stop.stopped and stop.best_epoch == 1
    with torch.no_grad():
        net.weight.fill_(3.0)
    stop.after_epoch(net, 3, 0.6, last=False)  # two epochs without a better one
    assert stop.stopped and torch.equal(net.weight, torch.full((2, 2), 1.0))


def test_owner_stop_with_a_minimum_does_not_stop_or_pick_a_best_before_it() -> None:
    """A lucky early epoch (accuracy 0.9 at epoch 0) neither ends the run nor is restored:
    with min_epochs 5 the first candidate is epoch 4 (the 5th trained)."""
    import torch

    net = torch.nn.Linear(2, 2)
    stop = OwnerStop(patience=2, fraction=0.2, seed=0, min_epochs=5)
    stop.split(np.arange(125))  # 20% of 125 labelled rows
    assert stop.validation is not None and len(stop.validation) == 25
    for epoch, accuracy in enumerate([0.9, 0.1, 0.1, 0.1, 0.5, 0.6, 0.4, 0.4]):
        with torch.no_grad():
            net.weight.fill_(float(epoch))
        stop.after_epoch(net, epoch, accuracy, last=False)
        assert not stop.stopped or epoch == 7, epoch  # the earliest stop: epoch 4 + 1 + 2
    assert stop.stopped and stop.best_epoch == 5 and stop.best == 0.6
    assert torch.equal(net.weight, torch.full((2, 2), 5.0))
    assert len(stop.history) == 8  # every epoch recorded, the early ones too


def test_owner_stop_minimum_beyond_the_last_epoch_keeps_the_last_weights() -> None:
    import torch

    net = torch.nn.Linear(2, 2)
    stop = OwnerStop(patience=1, fraction=0.5, seed=0, min_epochs=10)
    for epoch in range(3):
        with torch.no_grad():
            net.weight.fill_(float(epoch))
        stop.after_epoch(net, epoch, 1.0 - epoch / 10, last=epoch == 2)
    assert stop.stopped and stop.best_epoch == 2
    assert torch.equal(net.weight, torch.full((2, 2), 2.0))


def test_owner_min_epochs_beyond_owner_epochs_is_refused() -> None:
    from pydantic import ValidationError

    from vfl_core.config import DvflConfig

    with pytest.raises(ValidationError, match="owner_min_epochs"):
        DvflConfig(owner_epochs=10, owner_min_epochs=11)


def test_given_an_owner_minimum_when_trained_then_the_owner_trains_at_least_that_long(
    blocks: list[PartyData],
) -> None:
    """With owner_min_epochs 12 the owner trains at least 12 epochs plus the patience, and the
    restored best is epoch 11 (the 12th) or later."""
    train = config(epochs=1, owner_epochs=40, owner_patience=2, owner_lr=0.5, owner_min_epochs=12)
    fed, parties, _ = federation(blocks, train)
    fed.train()
    stop = parties[0].dvfl.owner_stop
    assert stop is not None and stop.stopped and stop.min_epochs == 12
    assert len(stop.history) >= 12 + 2  # the minimum, then at least the patience
    assert stop.best_epoch >= 11
    assert stop.best == max(stop.history[11:])


def test_given_owner_patience_when_trained_then_it_stops_early_and_ends_with_the_best(
    blocks: list[PartyData],
) -> None:
    train = config(epochs=1, owner_epochs=40, owner_patience=2, owner_lr=0.5)
    fed, parties, records = federation(blocks, train)
    fed.train()
    roles = parties[0].dvfl
    stop = roles.owner_stop
    assert stop is not None and stop.stopped
    assert len(stop.history) < 40  # stopped before the ceiling
    assert stop.best == max(stop.history)
    assert stop.best_state is not None
    best = np.concatenate([v.flatten().numpy() for v in stop.best_state.values()])
    np.testing.assert_array_equal(np.sort(weights(roles.owner)), np.sort(best))
    owner_rounds = [r for r in records if r.epoch >= 1 and r.losses]
    assert len(owner_rounds) == 40  # the later epochs are called, and do nothing
    assert fed.evaluate("test").overall().samples > 0


def test_given_a_period_in_guest_epochs_then_guests_write_only_in_every_kth_epoch(
    blocks: list[PartyData],
) -> None:
    """K = 2 over 4 guest epochs: epochs 2 and 4 write (half the uploads of K = 1)."""
    every, _, _ = federation(blocks, config(epochs=4))
    every.train()
    k2, _, _ = federation(blocks, config(epochs=4, period_epochs=2))
    k2.train()
    up_every = every.program_state.bytes_sent["guests_to_coordinator"]
    up_k2 = k2.program_state.bytes_sent["guests_to_coordinator"]
    assert up_every > 0 and up_k2 * 2 == up_every
    assert k2.program_state._writes(0, 1) and not k2.program_state._writes(0, 0)
