"""The latent-variable VFL: its math on toys with exact answers; the federation in one process
(the engine with its round program and the in-process transport): determinism, gradients equal
to one joint graph, the rows it learns from, MNAR, refusals, checkpoints."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from harness import resume_after_crash

from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.missingness import UNLABELLED, parse_mechanism
from vfl_core.data.party_dir import PartyData, PartySplit, labelled_rows_only, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError, ProtocolError, StaleRoundError
from vfl_core.methods.dlvm import latent_math as dm
from vfl_core.methods.dlvm.config import DlvmConfig
from vfl_core.methods.dlvm.messages import (
    DecodeCall,
    Decoded,
    DlvmBackwardCall,
    LabelledRowsCall,
    PartyGrads,
    Stage,
    StepCall,
)
from vfl_core.methods.dlvm.sampling import kept_experts, noise, posterior
from vfl_core.protocol import EmbedCall
from vfl_core.training.alignment import Batch
from vfl_core.training.engine import Callbacks, Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party


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

SECRET = b"dlvm-test-secret"
SMALL = DlvmConfig(latent_dim=4, z_dim=2, hidden=(16,), stage2_epochs=2, predict_samples=8)
TRAIN = TrainConfig(method="dlvm", seed=3, epochs=2, batch_size=128, weight_decay=0.0, dlvm=SMALL)


def prepared(tmp: Path, p_miss: float = 0.0, **kwargs: object) -> list[PartyData]:
    """Digits in four quadrants, 100 of the 1438 training labels kept (this project's anchor
    MAR 1, block 0 always held, unless `p_miss`)."""
    mar = parse_mechanism("mar1-anchor")
    args: dict = {"mechanisms": None if p_miss else {"train": mar, "test": mar}, "labels": 100}
    misses = [p_miss] * 4
    paths = prepare_parties(
        load_digits_dataset(), tmp, 4, misses, misses, 0.2, 0, **(args | kwargs)
    )
    return [load_party_dir(p) for p in paths]


@pytest.fixture(scope="module")
def few_labels(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    return prepared(tmp_path_factory.mktemp("dlvm"))


def with_dlvm(**update: object) -> TrainConfig:
    return TRAIN.model_copy(update={"dlvm": SMALL.model_copy(update=update)})


def federation(
    data: list[PartyData], train: TrainConfig = TRAIN, **kwargs: object
) -> tuple[Federation, dict[int, Party]]:
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}
    fed = Federation(InProcessTransport(parties), train, progress=False, **kwargs)  # type: ignore[arg-type]
    fed.align()
    return fed, parties


def test_given_few_labels_when_trained_then_stages_in_order_deterministic_and_scored(
    few_labels: list[PartyData],
) -> None:
    rounds: list = []
    finetune = with_dlvm(stage2="finetune")  # every party takes part in every round
    fed, parties = federation(few_labels, finetune, on_round=rounds.append)
    fed.train()
    again, twins = federation(few_labels, finetune)
    again.train()

    for block, party in parties.items():
        np.testing.assert_array_equal(party.parameters_vector(), twins[block].parameters_vector())
    # stage 1: every training sample, labelled or not; stage 2: the 100 the active party labels
    assert sum(len(b.index) for b in fed.plan(0)) == len(fed.alignments["train"]) == 1438
    assert sum(len(b.index) for b in fed.plan(TRAIN.epochs)) == 100
    assert fed.method_stats() == {"labelled_samples": 100}
    stage1 = [r for r in rounds if r.epoch < TRAIN.epochs]
    stage2 = [r for r in rounds if r.epoch >= TRAIN.epochs]
    assert len(stage1) == 2 * len(fed.plan(0)) and len(stage2) == 2 * len(fed.plan(2))
    assert all(r.losses.keys() == {0} and np.isfinite(r.losses[0]) for r in rounds)
    assert all(r.updated == r.present == r.pattern for r in rounds)  # nobody missed a phase
    report = fed.evaluate("test")
    assert report.to_json() == again.evaluate("test").to_json()
    assert report.overall().samples == 359  # MAR 1 keeps block 0: every test sample is held


def test_given_a_trained_federation_when_asked_again_or_restored_then_the_same_predictions(
    few_labels: list[PartyData],
) -> None:
    """Inference draws the same Monte Carlo noise at every request: a second evaluation, and one
    after every party was replaced by a copy restored from its state (a restarted client), give
    the same predictions as the first. (They used to be a new estimate at every request.)"""
    fed, parties = federation(few_labels)
    fed.train()
    first = [p.predicted for p in fed.predict_batches("test")]
    assert first and all(a is not None for a in first)
    second = [p.predicted for p in fed.predict_batches("test")]
    assert isinstance(fed.transport, InProcessTransport)
    for block, party in parties.items():
        copy = Party(party.party_id, party.data, party.config, secret=SECRET)
        copy.load_state_dict(party.state_dict())
        fed.transport.parties[block] = copy
    restored = [p.predicted for p in fed.predict_batches("test")]
    for a, b, c in zip(first, second, restored, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


# ---------------------------------------------------------------- gradients of one joint graph


def joint_graph(
    parties: dict[int, Party], fed: Federation, batch: Batch, stage: Stage, round_id: int
):
    """The experts of a batch through every party's encoder, the kept experts' posterior with
    the round's noise, and the log-weights with every decoder, in one autograd graph: the
    reference the messages must reproduce. Returns (h, log_w, the active party's networks)."""
    al, train = fed.alignments["train"], fed.config
    cfg = train.dlvm
    xs = {
        b: parties[b].batch("train", al.rows_of(b, batch.index), al.digest(batch.index))
        for b in batch.pattern
    }
    experts = {b: torch.cat(parties[b].dlvm.models.encoder(x.flatten(1)), 1) for b, x in xs.items()}
    kept = kept_experts(sorted(experts), train.seed, stage, round_id, cfg.expert_dropout)
    shape, dims = (len(batch.index), cfg.kappa), (cfg.latent_dim, cfg.z_dim)
    noise_h, noise_z = noise(train.seed, stage, round_id, shape, dims)
    mean, logvar, h = posterior(experts, noise_h, kept)
    active = parties[0].dlvm.active
    log_q = dm.gaussian_log_prob(h, mean.unsqueeze(1), logvar.unsqueeze(1))
    log_w = active.prior_terms(h, noise_z) - log_q
    for b, x in xs.items():
        log_w = log_w + parties[b].dlvm.models.decoder.log_prob(x.flatten(1), h)
    return h, log_w, active


def assert_same_grads(got: torch.nn.Module, want: torch.nn.Module, where: str) -> None:
    for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters(), strict=True):
        g = torch.zeros_like(p) if p.grad is None else p.grad
        w = torch.zeros_like(q) if q.grad is None else q.grad
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6, msg=f"{where}.{name}")


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_given_a_stage1_round_when_run_by_messages_then_gradients_equal_the_joint_graph(
    few_labels: list[PartyData], dropout: float
) -> None:
    fed, parties = federation(few_labels, with_dlvm(expert_dropout=dropout))
    batch = next(b for b in fed.plan(0) if len(b.pattern) == 4 and len(b.index) > 50)
    _, reference = federation(few_labels, fed.config)  # the same initial weights
    record = fed.run_round(0, 0, batch)
    assert record.losses.keys() == {0} and record.updated == (0, 1, 2, 3)

    _, log_w, _ = joint_graph(reference, fed, batch, Stage.BOUND, 0)
    loss = -dm.iwae_bound(log_w).mean()
    loss.backward()

    assert loss.item() == pytest.approx(record.losses[0], rel=1e-5)
    for b in parties:  # each party's encoder and decoder, from its Backward
        assert_same_grads(parties[b].dlvm.models, reference[b].dlvm.models, f"block {b}")
    active, want = parties[0].dlvm.active, reference[0].dlvm.active
    assert_same_grads(active.generative, want.generative, "q(z|h), p(h|z)")
    if dropout:  # a left-out expert had no say: its encoder's gradient is zero
        kept = kept_experts([0, 1, 2, 3], TRAIN.seed, Stage.BOUND, 0, dropout)
        assert 0 < len(kept) < 4


def test_given_a_stage2_round_when_run_by_messages_then_gradients_equal_the_joint_graph(
    few_labels: list[PartyData],
) -> None:
    fed, parties = federation(few_labels, with_dlvm(stage2="finetune"))  # not the paper's
    epoch = TRAIN.epochs  # the first epoch of stage 2
    batch = max(fed.plan(epoch), key=lambda b: (len(b.pattern), len(b.index)))
    _, reference = federation(few_labels, fed.config)  # the same initial weights
    record = fed.run_round(0, epoch, batch)
    assert record.losses.keys() == {0} and record.updated == batch.pattern

    h, log_w, active = joint_graph(reference, fed, batch, Stage.CLASSIFIER, 0)
    rows = fed.alignments["train"].rows_of(0, batch.index)
    y = torch.from_numpy(few_labels[0].splits["train"].labels[rows])
    picked = active.class_log_probs(h).gather(2, y.view(-1, 1, 1).expand(-1, h.shape[1], 1))
    weights = torch.log_softmax(log_w.detach(), dim=1)  # held fixed, as the paper's stage 2
    loss = -torch.logsumexp(weights + picked.squeeze(2), dim=1).mean()
    loss.backward()

    assert loss.item() == pytest.approx(record.losses[0], rel=1e-5)
    assert_same_grads(parties[0].dlvm.active.classifier, active.classifier, "classifier")
    for b in batch.pattern:  # the encoders fine-tune; the decoders do not train in stage 2
        got, want = parties[b].dlvm.models, reference[b].dlvm.models
        assert_same_grads(got.encoder, want.encoder, f"encoder {b}")
        assert all(p.grad is None for p in got.decoder.parameters())


# ---------------------------------------------------------------- the rows DLVM learns from


def _keep_ids(data: PartyData, ids: set[str]) -> PartyData:
    split = data.splits["train"]
    keep = np.isin(split.ids, list(ids))
    labels = None if split.labels is None else split.labels[keep]
    kept = PartySplit(split.ids[keep], split.features[keep], labels)
    return replace(data, splits={**data.splits, "train": kept})


def _encoders(parties: dict[int, Party]) -> dict[int, torch.Tensor]:
    return {
        b: torch.cat([p.detach().flatten() for p in party.dlvm.models.encoder.parameters()])
        for b, party in parties.items()
    }


def test_given_unlabelled_rows_and_feature_only_samples_when_trained_then_they_change_the_encoders(
    tmp_path: Path,
) -> None:
    """Labels at block 0 only, 100 of them, MCAR 0.3: stage 1 learns from every sample, also
    those without a label and those the label party does not hold (its step needs only the
    experts and the decoders' answers); without them every encoder ends elsewhere."""
    data = prepared(tmp_path, p_miss=0.3, label_blocks=[0])
    stage1 = with_dlvm(stage2_epochs=0).model_copy(update={"epochs": 1})
    rounds: list = []
    fed, everything = federation(data, stage1, on_round=rounds.append)
    fed.train()
    labelled = labelled_rows_only(data[0]).splits["train"].ids
    only = [_keep_ids(d, set(labelled.tolist())) for d in data]
    sub, labelled_only = federation(only, stage1)
    sub.train()

    assert len(fed.alignments["train"]) > 1000 and len(sub.alignments["train"]) == 100
    without_0 = [r for r in rounds if 0 not in r.pattern]
    assert without_0 and all(r.losses.keys() == {0} and r.updated == r.pattern for r in without_0)
    unlabelled = data[0].splits["train"].labels == UNLABELLED
    assert unlabelled.sum() == len(data[0].splits["train"]) - 100
    a, b = _encoders(everything), _encoders(labelled_only)
    assert all(not torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- MNAR, refusals, retries


@pytest.mark.parametrize("model", ["features", "latent"])
def test_given_mnar_when_trained_then_parties_without_the_batch_model_their_absence(
    tmp_path: Path, model: str
) -> None:
    data = prepared(tmp_path, p_miss=0.3)
    config = with_dlvm(mnar=True, mnar_model=model, stage2_epochs=1, stage2="finetune")
    fed, parties = federation(data, config)
    rounds: list = []
    fed.observers[:] = [Callbacks(round=rounds.append)]
    fed.train()
    partial = [r for r in rounds if len(r.pattern) < 4 and r.epoch < TRAIN.epochs]
    assert partial and all(r.updated == (0, 1, 2, 3) for r in partial)  # all four decoded
    stage2 = [r for r in rounds if r.epoch >= TRAIN.epochs]  # only the encoders fine-tune
    assert stage2 and all(r.updated == r.pattern for r in stage2)
    assert all(np.isfinite(r.losses[0]) for r in rounds)
    missing = next(b for b in range(4) if b not in partial[0].pattern)
    h = np.zeros((2, 3, SMALL.latent_dim), dtype=np.float32)
    answer = parties[missing].step(
        "dlvm", "DlvmDecode", DecodeCall(10**6, "test", None, b"", h, False)
    )
    assert answer.log_lik.shape == (2, 3) and (answer.log_lik < 0).all() and answer.grad is None


def test_given_bad_or_repeated_messages_when_a_party_gets_them_then_refused_or_cached(
    few_labels: list[PartyData],
) -> None:
    fed, parties = federation(few_labels)
    al = fed.alignments["train"]
    batch = next(b for b in fed.plan(0) if 1 in b.pattern)
    rows, digest = al.rows_of(1, batch.index), al.digest(batch.index)
    party = parties[1]
    expert = party.embed(EmbedCall(5, "train", rows, digest, True))
    assert expert.shape == (len(rows), 2 * SMALL.latent_dim)
    assert party.embed(EmbedCall(5, "train", rows, digest, True)) is expert  # a retry
    d = SMALL.latent_dim
    h = np.zeros((len(rows), 3, d), np.float32)
    with pytest.raises(ProtocolError, match="latent samples of shape"):
        party.step("dlvm", "DlvmDecode", DecodeCall(5, "train", rows, digest, h[:, :, :2], True))
    with pytest.raises(ProtocolError, match="NaN"):
        party.step(
            "dlvm",
            "DlvmDecode",
            DecodeCall(5, "train", rows, digest, np.full_like(h, np.nan), True),
        )
    with pytest.raises(ProtocolError, match="does not hold"):
        party.step("dlvm", "DlvmDecode", DecodeCall(5, "train", None, b"", h, True))  # no MNAR
    first = party.step("dlvm", "DlvmDecode", DecodeCall(5, "train", rows, digest, h, True))
    again = party.step("dlvm", "DlvmDecode", DecodeCall(5, "train", rows, digest, h, True))
    assert again is first and first.grad is not None and first.grad.shape == h.shape
    with pytest.raises(ProtocolError, match="other samples"):
        party.step("dlvm", "DlvmDecode", DecodeCall(5, "train", rows, digest, h + 1, True))
    feature_only = _without_labels(few_labels[1])
    with pytest.raises(ProtocolError, match="holds no labels"):
        feature_only.step(
            "dlvm", "DlvmStep", StepCall(5, 0, Stage.BOUND, 3, {1: expert}, {1: first})
        )
    with pytest.raises(ProtocolError, match="holds no labels"):
        feature_only.step("dlvm", "LabelledRows", LabelledRowsCall("train"))
    grads = PartyGrads(np.ones((len(rows), 3), np.float32), None)
    party.step("dlvm", "DlvmBackward", DlvmBackwardCall(5, 0, grads))
    party.step("dlvm", "DlvmBackward", DlvmBackwardCall(5, 0, grads))  # a retry steps nothing more
    with pytest.raises(StaleRoundError):
        party.embed(EmbedCall(4, "train", rows, digest, True))
    with pytest.raises(StaleRoundError):
        party.step("dlvm", "DlvmBackward", DlvmBackwardCall(4, 0, grads))
    assert len(parties[0].step("dlvm", "LabelledRows", LabelledRowsCall("train"))) == 100
    with pytest.raises(ProtocolError, match="only of the train split"):
        parties[0].step("dlvm", "LabelledRows", LabelledRowsCall("test"))


def _without_labels(data: PartyData) -> Party:
    """The party of `data` as a feature-only party."""
    splits = {k: PartySplit(v.ids, v.features, None) for k, v in data.splits.items()}
    meta = data.meta.model_copy(update={"has_labels": False, "unlabelled_rows": False})
    return Party("feature-only", replace(data, meta=meta, splits=splits), TRAIN, secret=SECRET)


def test_given_an_active_step_when_repeated_then_cached_and_other_content_refused(
    few_labels: list[PartyData],
) -> None:
    fed, parties = federation(few_labels)
    active = parties[0]
    al = fed.alignments["train"]
    batch = next(b for b in fed.plan(0) if b.pattern == (0,))
    rows, digest = al.rows_of(0, batch.index), al.digest(batch.index)
    expert = active.embed(EmbedCall(0, "train", rows, digest, True))
    h = np.zeros((len(rows), SMALL.kappa, SMALL.latent_dim), np.float32)
    decoded = active.step("dlvm", "DlvmDecode", DecodeCall(0, "train", rows, digest, h, True))
    call = StepCall(0, 0, Stage.BOUND, SMALL.kappa, {0: expert}, {0: decoded})
    first = active.step("dlvm", "DlvmStep", call)
    assert active.step("dlvm", "DlvmStep", call) is first
    with pytest.raises(ProtocolError, match="other content"):
        active.step("dlvm", "DlvmStep", replace(call, samples=SMALL.kappa - 1))
    with pytest.raises(ProtocolError, match="predict"):
        active.step("dlvm", "DlvmStep", replace(call, round_id=1, stage=Stage.PREDICT))


def test_given_equal_weight_prediction_then_the_mean_of_the_samples_class_probabilities(
    few_labels: list[PartyData],
) -> None:
    """--dlvm-predict average: p(y | h_l) averaged over the L posterior samples; SNIS weighs
    them by the decoders' likelihoods (here a sharp one), so the two differ."""
    fed, parties = federation(few_labels, with_dlvm(predict="average"))
    _, snis_parties = federation(few_labels)  # the same initial weights
    al = fed.alignments["test"]
    batch = next(b for b in fed.predict_batches("test") if 0 in b.pattern)
    rows, digest = al.rows_of(0, batch.index), al.digest(batch.index)
    expert = parties[0].embed(EmbedCall(3, "test", rows, digest, False))
    samples = 6
    log_lik = np.linspace(0, -50, len(rows) * samples, dtype=np.float32).reshape(-1, samples)
    call = StepCall(3, 0, Stage.PREDICT, samples, {0: expert}, {0: Decoded(log_lik)})

    average = parties[0].step("dlvm", "DlvmPredict", call)
    snis = snis_parties[0].step("dlvm", "DlvmPredict", call)

    d = (SMALL.latent_dim, SMALL.z_dim)
    noise_h, _ = noise(TRAIN.seed, Stage.PREDICT, 3, (len(rows), samples), d)
    h = posterior({0: torch.from_numpy(expert)}, noise_h, [0])[2]
    active = parties[0].dlvm.active
    with torch.no_grad():
        want = torch.exp(active.class_log_probs(h)).mean(dim=1).numpy()
    np.testing.assert_allclose(average, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(snis, average, atol=1e-3)


def test_given_a_regression_or_coded_categorical_party_when_dlvm_starts_then_one_line_error(
    few_labels: list[PartyData],
) -> None:
    data = few_labels[1]
    regression = replace(data, meta=data.meta.model_copy(update={"task": "regression"}))
    with pytest.raises(ConfigError, match="classification"):
        Party("p", regression, TRAIN, secret=SECRET)
    coded = replace(data, meta=data.meta.model_copy(update={"categorical": (3,)}))
    with pytest.raises(ConfigError, match="categorical"):
        Party("p", coded, TRAIN, secret=SECRET)
    with pytest.raises(ValueError, match="constant learning rates"):
        TRAIN.model_copy(update={"scheduler": "cosine"}).model_validate(
            TRAIN.model_dump() | {"scheduler": "cosine"}
        )


class LosesDecodes(InProcessTransport):
    """An in-process transport on which one party's Decode answers never arrive (a deadline)."""

    def __init__(self, parties: dict[int, Party], lost: int) -> None:
        super().__init__(parties)
        self.lost = lost

    def step(self, method: str, step: str, calls: Mapping[int, Any]) -> dict[int, Any]:
        answers = super().step(method, step, calls)
        if step != "DlvmDecode":
            return answers
        return {b: a for b, a in answers.items() if b != self.lost}


def test_given_a_party_that_misses_decode_then_the_round_steps_without_its_term(
    few_labels: list[PartyData], caplog: pytest.LogCaptureFixture
) -> None:
    """Its expert shaped the posterior, so its encoder still learns; its decoder sent no term,
    so it does not; the others train as usual, and the miss is recorded."""
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, TRAIN, secret=SECRET) for d in few_labels
    }
    fed = Federation(LosesDecodes(parties, lost=2), TRAIN, progress=False)
    fed.align()
    batch = next(b for b in fed.plan(0) if len(b.pattern) == 4)
    decoder = [p.detach().clone() for p in parties[2].dlvm.models.decoder.parameters()]
    encoder = [p.detach().clone() for p in parties[2].dlvm.models.encoder.parameters()]

    with caplog.at_level(logging.INFO, logger="vfl_core.training.engine"):
        record = fed.run_round(0, 0, batch)

    assert record.present == (0, 1, 2, 3) and record.updated == (0, 1, 2, 3)
    assert np.isfinite(record.losses[0])
    after = list(parties[2].dlvm.models.decoder.parameters())
    assert all(torch.equal(a, b) for a, b in zip(after, decoder, strict=True))
    moved = list(parties[2].dlvm.models.encoder.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(moved, encoder, strict=True))
    assert "round 0: block 2 missed decode" in caplog.text
    assert "block 1 missed" not in caplog.text


# ---------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("crash_at", [19, 39])  # in stage 1; in stage 2
def test_given_crash_after_checkpoint_when_resumed_then_bit_identical_to_no_crash(
    few_labels: list[PartyData], crash_at: int
) -> None:
    snapshot = resume_after_crash(few_labels, TRAIN, crash_at, SECRET)
    assert (snapshot["epoch"] >= TRAIN.epochs) == (crash_at == 39)


def test_given_a_confident_classifier_when_predicting_then_every_probability_is_at_most_one(
    few_labels: list[PartyData],
) -> None:
    """SNIS sums of near-one probabilities round above 1 in float32; the label parties refuse a
    score outside [0, 1], so such a batch went unscored before the clamp in DlvmRoles.predict."""
    _, parties = federation(few_labels)
    active = parties[0].dlvm.active
    last = [m for m in active.classifier.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():  # p(y = 0 | h) = 1.0 exactly in float32, for every h
        last.weight.zero_()
        last.bias.copy_(torch.tensor([100.0] + [0.0] * (len(last.bias) - 1)))
    fed, _ = federation(few_labels)
    al = fed.alignments["test"]
    worst = 0.0
    for request, batch in enumerate(b for b in fed.predict_batches("test") if 0 in b.pattern):
        rows, digest = al.rows_of(0, batch.index), al.digest(batch.index)
        expert = parties[0].embed(EmbedCall(request, "test", rows, digest, False))
        samples = 50
        log_lik = np.random.default_rng(request).normal(size=(len(rows), samples))
        answers = {0: Decoded(log_lik.astype(np.float32))}
        call = StepCall(request, 0, Stage.PREDICT, samples, {0: expert}, answers)
        probs = parties[0].step("dlvm", "DlvmPredict", call)
        worst = max(worst, float(probs.max()))
        assert ((probs >= 0) & (probs <= 1)).all()
    assert worst == 1.0  # the softmax weights of some rows summed above 1 before the clamp
