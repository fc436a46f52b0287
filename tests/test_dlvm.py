"""The latent-variable VFL: its math on toys with exact answers, and its in-process federation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from vfl_core import dlvm_math as dm
from vfl_core.data import PartyData, labelled_rows_only, load_party_dir
from vfl_core.datasets import load_digits_dataset
from vfl_core.dlvm import DlvmParty
from vfl_core.dlvm_models import DlvmConfig
from vfl_core.dlvm_run import build_federation
from vfl_core.errors import ProtocolError
from vfl_core.missingness import parse_mechanism
from vfl_core.prepare import prepare_parties


def normal_log_prob(x: torch.Tensor, mean: float | torch.Tensor, var: float) -> torch.Tensor:
    return -0.5 * (math.log(2 * math.pi * var) + (x - mean) ** 2 / var)


# ---------------------------------------------------------------- posterior over h


def test_posterior_of_one_block_is_its_own_gaussian() -> None:
    gen = torch.Generator().manual_seed(0)
    mean, logvar = torch.randn(5, 3, generator=gen), torch.randn(5, 3, generator=gen)
    got_mean, got_logvar = dm.product_of_experts([mean], [logvar])
    torch.testing.assert_close(got_mean, mean)
    torch.testing.assert_close(got_logvar, logvar)


def test_posterior_adds_precisions_and_weights_means() -> None:
    means = [torch.tensor([[0.0]]), torch.tensor([[3.0]])]
    logvars = [torch.log(torch.tensor([[1.0]])), torch.log(torch.tensor([[0.5]]))]
    mean, logvar = dm.product_of_experts(means, logvars)
    # precisions 1 and 2 add to 3; the mean is (1 * 0 + 2 * 3) / 3
    torch.testing.assert_close(torch.exp(-logvar), torch.tensor([[3.0]]))
    torch.testing.assert_close(mean, torch.tensor([[2.0]]))


def test_a_missing_block_drops_out() -> None:
    """Two equal experts give their mean and half their variance; removing one (a missing
    block) leaves exactly the other."""
    mean, logvar = torch.tensor([[1.5, -2.0]]), torch.tensor([[0.3, -0.7]])
    both = dm.product_of_experts([mean, mean], [logvar, logvar])
    torch.testing.assert_close(both[0], mean)
    torch.testing.assert_close(both[1], logvar - math.log(2.0))
    one = dm.product_of_experts([mean], [logvar])
    torch.testing.assert_close(one[1], logvar)


# ---------------------------------------------------------------- the bound and SNIS


def toy_log_joint(x: float, h: torch.Tensor) -> torch.Tensor:
    """h ~ N(0, 1), x | h ~ N(h, 1): log p(x, h). Then p(x) = N(x; 0, 2) and
    p(h | x) = N(x / 2, 1 / 2)."""
    return normal_log_prob(h, 0.0, 1.0) + normal_log_prob(torch.tensor(x), h, 1.0)


def toy_bound(x: float, q_mean: float, q_var: float, samples: int, draws: int) -> float:
    """Mean of the production IWAE bound over `draws` independent estimates."""
    gen = torch.Generator().manual_seed(1)
    mean = torch.full((draws, 1), q_mean)
    logvar = torch.full((draws, 1), math.log(q_var))
    h = dm.reparameterise(mean, logvar, torch.randn(draws, samples, 1, generator=gen))
    log_q = dm.gaussian_log_prob(h, mean.unsqueeze(1), logvar.unsqueeze(1))  # (draws, S)
    log_w = toy_log_joint(x, h.squeeze(-1)) - log_q
    return float(dm.iwae_bound(log_w).mean())


def test_bound_is_exact_with_the_true_posterior() -> None:
    x = 1.3
    exact = float(normal_log_prob(torch.tensor(x), 0.0, 2.0))
    assert toy_bound(x, x / 2, 0.5, samples=10, draws=100) == pytest.approx(exact, abs=1e-5)


def test_bound_is_below_the_log_likelihood_and_tightens_with_kappa() -> None:
    x = 1.3
    exact = float(normal_log_prob(torch.tensor(x), 0.0, 2.0))
    bounds = [toy_bound(x, -0.5, 2.0, samples=s, draws=4000) for s in (1, 10, 1000)]
    assert bounds[0] < bounds[1] < bounds[2] < exact
    assert exact - bounds[2] < 0.01


def test_snis_prediction_agrees_with_exact_marginalisation() -> None:
    """p(y = 1 | x) = int sigmoid(2h) p(h | x) dh on the toy; SNIS from a poor proposal with
    many samples must match the quadrature."""
    x = 0.8
    grid = torch.linspace(-8, 8, 20001, dtype=torch.float64)
    posterior = torch.exp(normal_log_prob(grid, x / 2, 0.5))
    exact = float((torch.sigmoid(2 * grid) * posterior).sum() * (grid[1] - grid[0]))
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(1, 200_000, generator=gen) * math.sqrt(2.0)  # proposal N(0, 2)
    log_w = toy_log_joint(x, h) - normal_log_prob(h, 0.0, 2.0)  # (1, L)
    p1 = torch.sigmoid(2 * h)
    probs = torch.stack([1 - p1, p1], dim=-1)  # (1, L, 2)
    got = float(dm.snis(log_w, probs)[0, 1])
    assert got == pytest.approx(exact, abs=3e-3)
    assert float(dm.snis(log_w[:, :50], probs[:, :50])[0].sum()) == pytest.approx(1.0)


def test_linearised_term_has_the_parties_gradient() -> None:
    """The active party re-attaches a party's log-likelihood to h: value and gradient exact."""
    h = torch.randn(2, 3, 4, requires_grad=True)
    value, grad = torch.randn(2, 3), torch.randn(2, 3, 4)
    term = dm.linearised(value, grad, h)
    torch.testing.assert_close(term, value)
    term.sum().backward()
    torch.testing.assert_close(h.grad, grad)


# ---------------------------------------------------------------- the federation


CONFIG = DlvmConfig(latent_dim=4, z_dim=2, hidden=(16,), stage1_epochs=2, stage2_epochs=2)


@pytest.fixture(scope="module")
def few_labels(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    """Digits in 4 quadrants, MAR 1 missingness, 100 labels."""
    out = tmp_path_factory.mktemp("dlvm")
    mar = parse_mechanism("mar1")
    paths = prepare_parties(
        load_digits_dataset(),
        Path(out),
        4,
        [0.0] * 4,
        [0.0] * 4,
        0.2,
        0,
        mechanisms={"train": mar, "test": mar},
        labels=100,
    )
    return [load_party_dir(p) for p in paths]


def trained(data: list[PartyData], config: DlvmConfig = CONFIG, seed: int = 0):
    federation = build_federation(data, config, seed=seed)
    federation.train()
    return federation


def test_training_is_deterministic_and_predicts(few_labels: list[PartyData]) -> None:
    one, two = trained(few_labels), trained(few_labels)
    for b in one.parties:
        assert np.array_equal(
            one.parties[b].parameters_vector(), two.parties[b].parameters_vector()
        )
    assert all(np.isfinite(one.losses["bound"])) and all(np.isfinite(one.losses["classifier"]))
    evaluation = one.evaluate("test")
    assert evaluation.accuracy == two.evaluate("test").accuracy
    assert sum(evaluation.samples.values()) == 359  # MAR keeps block 0: every test sample held
    assert 0.0 <= evaluation.accuracy <= 1.0


def test_unlabelled_rows_change_the_encoders(few_labels: list[PartyData]) -> None:
    """Stage 1 runs over every training sample: with the unlabelled rows the encoders of every
    party (feature-only ones included) learn something else than from the labelled rows alone,
    and stage 1 runs over all of them."""
    stage1 = CONFIG.model_copy(update={"stage2_epochs": 0})
    with_all = trained(few_labels, stage1)
    labelled_ids = set()
    for d in few_labels:
        labelled = labelled_rows_only(d).splits["train"]
        labelled_ids |= set(labelled.ids.tolist())
    only = [_keep_ids(d, labelled_ids) for d in few_labels]
    without = trained(only, stage1)
    assert len(with_all.alignments["train"]) == 1438  # every training sample, labelled or not
    assert len(without.alignments["train"]) == 100
    assert with_all.round_id > 2 * without.round_id
    for b in with_all.parties:
        a = with_all.parties[b].models.encoder.state_dict()
        c = without.parties[b].models.encoder.state_dict()
        assert any(not torch.equal(a[k], c[k]) for k in a)


def _keep_ids(data: PartyData, ids: set[str]) -> PartyData:
    from dataclasses import replace

    from vfl_core.data import PartySplit

    split = data.splits["train"]
    keep = np.isin(split.ids, list(ids))
    labels = None if split.labels is None else split.labels[keep]
    kept = PartySplit(split.ids[keep], split.features[keep], labels)
    return replace(data, splits={**data.splits, "train": kept})


def test_mnar_variant_asks_every_party(few_labels: list[PartyData]) -> None:
    """With MNAR every party models whether it holds a sample: a party without the batch still
    answers Decode (its missingness term), and training stays finite."""
    federation = trained(few_labels, CONFIG.model_copy(update={"mnar": True}))
    assert all(np.isfinite(federation.losses["bound"]))
    party = federation.parties[3]
    h = np.zeros((2, 3, CONFIG.latent_dim), dtype=np.float32)
    answer = party.decode(99, "train", None, h, train=False)
    assert answer.log_lik.shape == (2, 3) and (answer.log_lik < 0).all()


def test_party_refuses_bad_messages(few_labels: list[PartyData]) -> None:
    party = DlvmParty(few_labels[1], CONFIG, seed=0, active=False)
    rows = np.arange(3)
    party.encode(1, "train", rows, train=True)
    with pytest.raises(ProtocolError, match="latent samples of shape"):
        party.decode(1, "train", rows, np.zeros((3, CONFIG.latent_dim), np.float32), True)
    bad = np.full((3, 2, CONFIG.latent_dim), np.nan, dtype=np.float32)
    with pytest.raises(ProtocolError, match="NaN"):
        party.decode(1, "train", rows, bad, True)
    with pytest.raises(ProtocolError, match="does not hold"):
        party.decode(1, "train", None, bad, True)  # no MNAR: a party answers only its rows
    with pytest.raises(ProtocolError, match="holds no labels"):
        DlvmParty(
            few_labels[1].__class__(
                few_labels[1].meta.model_copy(update={"has_labels": False}), few_labels[1].splits
            ),
            CONFIG,
            0,
            True,
        )
