"""The label-leak defences in a real training run (issue 32): each is applied by its party, the
run record says what was applied and the embeddings' epsilon, and the max-norm defence takes the
norm attack's signal out of the gradients a feature-only party receives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmarks.privacy import RecordingTransport, Relayed, run_one, setting, write_parties
from benchmarks.tabular.tables import tables
from vfl_core.config import TrainConfig
from vfl_core.privacy.guards import PartyGuard
from vfl_core.privacy.pretrain import Pretrain, pretrain_tower
from vfl_core.simulate import SimulationConfig, run_simulation


@pytest.fixture(scope="module")
def breast_cancer():
    return tables(None, quick=False)["breast_cancer"](0, False)


def _attack(run: dict, name: str) -> float:
    return max(r[name] for r in run["attacks"] if r["viewer"] == "party 1" and r[name] is not None)


@pytest.mark.slow
def test_given_max_norm_when_training_then_the_norm_attack_loses_its_signal(breast_cancer):
    plain = run_one(breast_cancer, k=2, seed=0, epochs=2, known=20, defence="none")
    guarded = run_one(breast_cancer, k=2, seed=0, epochs=2, known=20, defence="max_norm")
    assert _attack(guarded, "norm") < _attack(plain, "norm") or _attack(plain, "norm") < 0.6
    assert _attack(guarded, "norm") < 0.6
    assert guarded["accuracy"] is not None and guarded["accuracy"] > 0.8  # it still learns


@pytest.mark.slow
def test_given_label_dp_when_training_then_the_label_party_trains_on_randomised_labels(
    breast_cancer,
):
    run = run_one(breast_cancer, k=2, seed=0, epochs=1, known=20, defence="label_dp")
    assert run["defence"] == "label_dp" and run["accuracy"] is not None


def test_given_a_privacy_section_when_the_config_loads_then_the_party_guard_follows_it():
    config = TrainConfig.model_validate(
        {"privacy": {"gradient_defence": "direction", "label_epsilon": 2.0}}
    )
    guard = PartyGuard(config.privacy, config.seed, block=0)
    labels = np.zeros(10000, dtype=np.int64)
    flipped = (guard.labels(labels, 2) != labels).mean()
    assert flipped == pytest.approx(1 / (math.exp(2.0) + 1), abs=0.02)


def test_given_noise_without_clip_when_the_config_loads_then_it_is_refused():
    with pytest.raises(ValueError, match="embedding_noise needs embedding_clip"):
        TrainConfig.model_validate({"privacy": {"embedding_noise": 1.0}})


@pytest.mark.slow
def test_given_withhold_when_training_then_no_attack_at_a_feature_party_reads_anything(
    breast_cancer,
):
    run = run_one(breast_cancer, k=2, seed=0, epochs=2, known=40, defence="withhold")
    party = [r for r in run["attacks"] if r["viewer"] == "party 1"]
    assert len(party) == 2  # one row per epoch
    for attack in ("norm", "direction", "xdirection", "knn", "fit", "sum_norm", "sum_pca"):
        assert all(r[attack] == pytest.approx(0.5) for r in party), attack
    assert set(run["completion"]["party 1"]) == {"40", "300"}
    assert run["accuracy"] > 0.8  # the label party still learns on the others' embeddings


@pytest.mark.slow
def test_given_per_row_noise_when_training_then_it_trains_and_the_summed_attacks_are_recorded(
    breast_cancer,
):
    run = run_one(breast_cancer, k=2, seed=0, epochs=2, known=40, defence="per_row_p12")
    last = [r for r in run["attacks"] if r["viewer"] == "party 1"][-1]
    assert last["sum_pca"] is not None and last["sum_fit"] is not None
    assert run["accuracy"] > 0.8


@pytest.mark.slow
def test_given_label_prior_when_training_then_it_trains_and_the_attacks_are_recorded(
    breast_cancer,
):
    run = run_one(breast_cancer, k=2, seed=0, epochs=1, known=20, defence="label_prior_e2")
    assert run["defence"] == "label_prior_e2" and run["accuracy"] > 0.8
    assert next(r for r in run["attacks"] if r["viewer"] == "party 1")["norm"] is not None


@pytest.mark.slow
def test_given_withhold_when_training_then_a_feature_party_bottom_model_stays_as_drawn(
    breast_cancer, tmp_path
):
    # A step on a zero gradient still applies Adam's weight decay (added to the gradient and
    # normalised: about the learning rate per weight per round), which erased the random
    # features the label party's heads learn on; under withhold the tower does not step.
    sources = write_parties(breast_cancer, 2, tmp_path)
    config = SimulationConfig(
        tables=sources, clients=2, train={"seed": 0, "epochs": 2, **setting("withhold")}
    )
    relayed = Relayed()
    result = run_simulation(config, wrap=lambda t: RecordingTransport(t, relayed))
    for block, before in relayed.initial.items():
        after = result.parties[block].f.state_dict()
        same = all(torch.equal(v, after[k]) for k, v in before.state_dict().items())
        assert same == (block == 1), block  # the label party (block 0) still trains its own


@pytest.mark.slow
def test_given_withhold_with_denoise_when_training_then_feature_towers_learn_only_before_it(
    breast_cancer, tmp_path
):
    # The feature-only party's tower is trained on its own rows before the first round (what
    # the meter records as its bottom model before any gradient), then never moves; every
    # gradient attack at it reads nothing.
    sources = write_parties(breast_cancer, 2, tmp_path)
    train = {"seed": 0, "epochs": 2, **setting("withhold_denoise")}
    relayed = Relayed()
    result = run_simulation(
        SimulationConfig(tables=sources, clients=2, train=train),
        wrap=lambda t: RecordingTransport(t, relayed),
    )
    drawn = setting("withhold")
    plain = run_simulation(
        SimulationConfig(tables=sources, clients=2, train={"seed": 0, "epochs": 1, **drawn})
    )
    before = relayed.initial[1].state_dict()
    after = result.parties[1].f.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    first = plain.parties[1].f.state_dict()  # withhold alone: the tower as drawn
    assert not all(torch.equal(v, first[k]) for k, v in before.items())
    for grad in (g for (b, _r), g in relayed.grads.items() if b == 1):
        assert not grad.any()  # all it receives is zeros
    assert result.reports  # it trained and was evaluated


@pytest.mark.slow
def test_given_pretrain_on_all_rows_when_training_then_the_tower_learned_every_row_it_holds(
    breast_cancer, tmp_path
):
    # `pretrain_rows: all`: the feature-only party's tower is the drawn one pretrained on its
    # training rows followed by its test rows (features only), exactly as pretrain_tower does.
    sources = write_parties(breast_cancer, 2, tmp_path)

    def initial(name: str) -> tuple[torch.nn.Module, object]:
        relayed = Relayed()
        train = {"seed": 0, "epochs": 1, **setting(name)}
        result = run_simulation(
            SimulationConfig(tables=sources, clients=2, train=train),
            wrap=lambda t: RecordingTransport(t, relayed),
        )
        return relayed.initial[1], result.parties[1]

    drawn, party = initial("withhold")
    pretrained, _ = initial("withhold_denoise_all")
    only_train, _ = initial("withhold_denoise")
    data = party.data
    rows = np.concatenate([data.splits["train"].features, data.splits["test"].features])
    dense = int(np.prod(data.meta.feature_shape)) - len(data.meta.categorical)
    privacy = TrainConfig(**setting("withhold_denoise_all")).privacy
    plan = Pretrain(privacy.pretrain_epochs, privacy.pretrain_corruption, "denoise")
    pretrain_tower(drawn, rows, dense, plan, 0, 1, torch.device("cpu"))
    want, got = drawn.state_dict(), pretrained.state_dict()
    assert all(torch.equal(v, got[k]) for k, v in want.items())
    other = only_train.state_dict()
    assert not all(torch.equal(v, other[k]) for k, v in want.items())


@pytest.mark.slow
def test_given_linear_towers_under_withhold_when_training_then_a_feature_tower_is_a_full_rank_map(
    breast_cancer, tmp_path
):
    # `withhold_lin_*` (`--hidden ""`): a feature-only party's bottom model is one fixed Linear
    # layer at least as wide as its block, so a classifier completing it can read no more than
    # the party's raw columns give it (the meter's `gain over raw`); it never moves.
    sources = write_parties(breast_cancer, 2, tmp_path)
    train = {"seed": 0, "epochs": 1, **setting("withhold_lin_e64_h2048")}
    relayed = Relayed()
    result = run_simulation(
        SimulationConfig(tables=sources, clients=2, train=train),
        wrap=lambda t: RecordingTransport(t, relayed),
    )
    tower = result.parties[1].f
    linears = [m for m in tower.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 1 and not any(isinstance(m, torch.nn.ReLU) for m in tower.modules())
    weight = linears[0].weight.detach().double()
    assert weight.shape[0] == 64 and torch.linalg.matrix_rank(weight) == weight.shape[1]
    before = relayed.initial[1].state_dict()
    assert all(torch.equal(v, tower.state_dict()[k]) for k, v in before.items())
