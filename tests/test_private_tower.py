"""A feature-only party's fixed orthogonal tower drawn from its own seed (issue 44,
vfl_core.privacy.private_tower): the map, its seeds, what model completion gains on it, what the
label party reads back, the setting's checks, and the tower in a training run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from benchmarks.privacy import RecordingTransport, Relayed, setting, write_parties
from benchmarks.privacy.attacks import completion_attack, known_rows
from benchmarks.privacy.readback import readback
from benchmarks.tabular.tables import tables
from vfl_client.runner import ClientConfig, tower_seed
from vfl_core.config import TrainConfig
from vfl_core.errors import ConfigError
from vfl_core.privacy.private_tower import OrthogonalTower, fixed_tower, orthogonal_map
from vfl_core.simulate import SimulationConfig, run_simulation

ORTHO = {"privacy": {"gradient_defence": "withhold", "feature_tower": "orthogonal"}}


def _block(n: int = 3000, width: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Correlated standardised columns and a label that a linear score of them decides."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, width)) @ rng.standard_normal((width, width))
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    y = (x @ rng.standard_normal(width) + rng.standard_normal(n) > 0.8).astype(int)
    return x, y


def test_given_a_seed_when_drawn_then_the_map_has_orthonormal_columns_and_one_seed_fixes_it():
    w = orthogonal_map(7, 64, seed=11, block=1).double()
    assert w.shape == (64, 7)
    torch.testing.assert_close(w.T @ w, torch.eye(7, dtype=torch.float64), atol=1e-6, rtol=0)
    assert not w[7:].any()  # the block's F coordinates, then zeros
    assert torch.equal(orthogonal_map(7, 64, 11, 1), orthogonal_map(7, 64, 11, 1))


def test_given_two_parties_seeds_when_drawn_then_their_maps_differ_and_the_run_seed_fixes_none():
    run_seed = 0
    mine, theirs = (
        fixed_tower("orthogonal", (5,), 16, run_seed, b, s) for b, s in ((1, 41), (2, 97))
    )
    assert mine is not None and theirs is not None
    assert not torch.allclose(mine.weight, theirs.weight[:, :5])
    # what every party can draw from the federation's seed is another map
    shared = fixed_tower("orthogonal", (5,), 16, run_seed, 1, None)
    assert shared is not None and not torch.allclose(mine.weight, shared.weight)
    assert fixed_tower("model", (5,), 16, run_seed, 1, 41) is None  # the run's own architecture


@pytest.mark.parametrize("labels", [40, 300])
def test_given_an_orthogonal_map_when_completed_then_it_gains_nothing_over_the_raw_block(labels):
    # The meter's model completion (a logistic regression after a per-coordinate scaler) on the
    # rotated block scores as on the raw block, within the scaler's sampling noise.
    gains = []
    for seed in range(5):
        x, y = _block(seed=seed)
        w = orthogonal_map(x.shape[1], 64, seed=seed + 100, block=1).double().numpy()
        gains.append(completion_attack(x @ w.T, x, y, known_rows(y, labels, seed))["gain"])
    assert max(gains) <= 0.02 and abs(float(np.mean(gains))) < 0.01  # the acceptance's line


def test_given_an_orthogonal_map_when_an_invariant_classifier_fits_then_it_scores_the_same():
    # Without the per-coordinate scaler, an L2-regularised logistic regression on W x is the one
    # on x (its weights W v, the penalty unchanged as W^T W = I): the same scores, exactly.
    x, y = _block(n=600)
    w = orthogonal_map(x.shape[1], 64, seed=7, block=1).double().numpy()
    chosen = known_rows(y, 40, 0)
    raw = LogisticRegression(max_iter=5000, tol=1e-10).fit(x[chosen], y[chosen])
    rotated = LogisticRegression(max_iter=5000, tol=1e-10).fit((x @ w.T)[chosen], y[chosen])
    np.testing.assert_allclose(
        raw.decision_function(x), rotated.decision_function(x @ w.T), atol=1e-5
    )


def test_given_embeddings_when_read_back_then_only_the_federation_seeds_map_is_exact():
    x, y = _block(n=800, width=5)
    known = known_rows(y, 40, 0)
    private = orthogonal_map(5, 16, seed=12345, block=1).double().numpy()
    shared = orthogonal_map(5, 16, seed=0, block=1).double().numpy()
    with_private = readback(x @ private.T, x, federation_seed=0, block=1, known=known)
    with_shared = readback(x @ shared.T, x, federation_seed=0, block=1, known=known)
    assert with_shared["federation map"] < 1e-6  # the label party rebuilds it and reads x
    assert with_private["federation map"] > 1.0  # another rotation: nothing read
    assert with_private["no map"] == pytest.approx(1.0)
    assert with_private["known rows"] < 1e-6  # a rotation is fixed by F known rows


def test_given_bad_settings_when_checked_then_each_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="wider than --embed-dim 4") as info:
        orthogonal_map(6, 4, seed=1, block=2)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="is the run's --seed"):
        fixed_tower("orthogonal", (3,), 8, 5, 1, 5)
    with pytest.raises(ValueError, match="needs gradient_defence withhold"):
        TrainConfig.model_validate({"privacy": {"feature_tower": "orthogonal"}})
    both = {**ORTHO["privacy"], "feature_pretrain": "denoise"}
    with pytest.raises(ValueError, match="feature_pretrain must be none"):
        TrainConfig.model_validate({"privacy": both})
    train = TrainConfig.model_validate(ORTHO)
    client = ClientConfig(data="party1")
    with pytest.raises(ConfigError, match="--private-tower-seed"):
        tower_seed(client, train, has_labels=False, run_id="r")
    assert tower_seed(client, train, has_labels=True, run_id="r") is None  # the label party
    seeded = client.model_copy(update={"private_tower_seed": 9})
    assert tower_seed(seeded, train, has_labels=False, run_id="r") == 9


@pytest.mark.slow
def test_given_orthogonal_towers_when_training_then_each_is_its_private_map_and_never_moves(
    tmp_path,
):
    table = tables(None, quick=False)["breast_cancer"](0, False)
    sources = write_parties(table, 3, tmp_path)
    seeds = {1: 501, 2: 502}
    train = {"seed": 0, "epochs": 1, **setting("withhold_ortho_h1024")}
    relayed = Relayed()
    config = SimulationConfig(tables=sources, clients=3, train=train, private_tower_seeds=seeds)
    result = run_simulation(config, wrap=lambda t: RecordingTransport(t, relayed))
    for block, seed in seeds.items():
        tower = result.parties[block].f
        width = int(np.prod(result.parties[block].data.meta.feature_shape))
        assert isinstance(tower, OrthogonalTower)
        assert torch.equal(tower.weight, orthogonal_map(width, 64, seed, block))  # as drawn
        assert torch.equal(tower.weight, relayed.initial[block].weight)
        rows = result.parties[block].split("train").features
        z = (rows - rows.mean(axis=0)) / np.where(rows.std(axis=0) > 0, rows.std(axis=0), 1.0)
        with torch.no_grad():  # its columns standardised by its own training rows, rotated
            sent = tower(torch.from_numpy(rows)).numpy()
        np.testing.assert_allclose(sent, z @ tower.weight.numpy().T, atol=1e-4)
    for grad in (g for (b, _r), g in relayed.grads.items() if b != 0):
        assert not grad.any()  # nothing label-derived reaches them
    label_tower = result.parties[0].f.state_dict()
    before = relayed.initial[0].state_dict()
    assert not all(torch.equal(v, label_tower[k]) for k, v in before.items())  # it trains
    assert result.reports
