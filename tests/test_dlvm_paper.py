"""The latent-variable VFL as the FALSE-VFL paper wrote it (issue 30): the posterior of its
Eq. (1) on a hand-computed case, the frozen stage 2 that sends no gradient, the label routing
(the active party holds every label, an aligned labelled reserve) and the Vanilla VFL baseline
that zero-imputes missing blocks at inference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_dlvm import SMALL, federation, prepared, with_dlvm
from test_methods import ALL, K, _prepare
from test_methods import config as method_config
from test_methods import federation as method_federation

from vfl_core.data.missingness import UNLABELLED
from vfl_core.data.party_dir import PartyData
from vfl_core.methods.dlvm import latent_math as dm
from vfl_core.methods.dlvm.sampling import posterior
from vfl_core.methods.registry import method_spec
from vfl_core.training.inprocess import InProcessTransport

# ---------------------------------------------------------------- Eq. (1)


def test_posterior_matches_eq_1_on_a_hand_computed_case() -> None:
    """Three experts in 2-d: means (0, 1), (3, -1), (6, 3); variances (1, 2), (0.5, 2), (0.25, 1).
    Eq. (1): the mean is the plain average (3, 1); the precisions add: (1 + 2 + 4, 0.5 + 0.5 + 1)
    = (7, 2), so the variance is (1/7, 1/2)."""
    means = [torch.tensor([[0.0, 1.0]]), torch.tensor([[3.0, -1.0]]), torch.tensor([[6.0, 3.0]])]
    variances = [[1.0, 2.0], [0.5, 2.0], [0.25, 1.0]]
    logvars = [torch.log(torch.tensor([v])) for v in variances]
    mean, logvar = dm.mean_of_experts(means, logvars)
    torch.testing.assert_close(mean, torch.tensor([[3.0, 1.0]]))
    torch.testing.assert_close(torch.exp(logvar), torch.tensor([[1 / 7, 1 / 2]]))
    # the product of experts (the option) weights the means by precision instead
    product, _ = dm.product_of_experts(means, logvars)
    torch.testing.assert_close(product, torch.tensor([[(0 + 6 + 24) / 7, (0.5 - 0.5 + 3) / 2]]))


def test_a_missing_party_drops_out_of_eq_1_and_the_scale_stays() -> None:
    """Two observed experts of mean 2 give mean 2 (not 4): the average keeps its scale whatever
    the number of parties; the samples are drawn from Eq. (1) by default."""
    mean, logvar = torch.tensor([[2.0]]), torch.tensor([[math.log(0.5)]])
    both = dm.mean_of_experts([mean, mean], [logvar, logvar])
    torch.testing.assert_close(both[0], mean)
    torch.testing.assert_close(both[1], logvar - math.log(2.0))
    experts = {0: torch.cat([mean, logvar], 1), 3: torch.tensor([[4.0, 0.0]])}
    noise_h = torch.zeros(1, 5, 1)
    got_mean, _, h = posterior(experts, noise_h, [0, 3])
    torch.testing.assert_close(got_mean, torch.tensor([[3.0]]))  # (2 + 4) / 2
    torch.testing.assert_close(h, torch.full((1, 5, 1), 3.0))


# ---------------------------------------------------------------- the frozen stage 2


class Recording(InProcessTransport):
    """The in-process transport, noting every method step it carries (name, callees)."""

    calls: list[tuple[str, tuple[int, ...]]]

    def step(self, method, name, calls):  # type: ignore[override]
        self.calls.append((name, tuple(sorted(calls))))
        return super().step(method, name, calls)


def _weights(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in module.parameters()])


def test_given_the_default_stage2_when_audited_then_no_gradient_message_and_theta_g_frozen(
    tmp_path: Path,
) -> None:
    data = prepared(tmp_path, p_miss=0.2)
    config = with_dlvm(stage2_epochs=2).model_copy(update={"epochs": 1})
    assert config.dlvm.stage2 == "frozen" and config.dlvm.posterior == "mean"
    fed, parties = federation(data, config)
    fed.transport.__class__ = Recording  # the same transport, its steps noted
    fed.transport.calls = []  # type: ignore[attr-defined]
    for round_id, batch in enumerate(fed.plan(0)):
        fed.run_round(round_id, 0, batch)
    assert any(name == "DlvmBackward" for name, _ in fed.transport.calls)  # stage 1 has them
    fed.transport.calls = []  # type: ignore[attr-defined]
    before = {b: _weights(p.dlvm.models) for b, p in parties.items()}
    generative = _weights(parties[0].dlvm.active.generative)
    classifier = _weights(parties[0].dlvm.active.classifier)
    records = [fed.run_round(1000 + i, 1, b) for i, b in enumerate(fed.plan(1))]

    names = {name for name, _ in fed.transport.calls}  # type: ignore[attr-defined]
    assert names == {"LabelledRows", "DlvmDecode", "DlvmStep"}, names  # no DlvmBackward
    assert records and all(r.losses.keys() == {0} and r.updated == (0,) for r in records)
    for b, party in parties.items():  # Theta_g: every encoder and decoder ...
        assert torch.equal(_weights(party.dlvm.models), before[b]), f"block {b} moved"
    assert torch.equal(_weights(parties[0].dlvm.active.generative), generative)  # q(z|h), p(h|z)
    assert not torch.equal(_weights(parties[0].dlvm.active.classifier), classifier)  # phi learns


def test_given_finetune_when_stage2_runs_then_the_encoders_get_backward_messages(
    tmp_path: Path,
) -> None:
    data = prepared(tmp_path, p_miss=0.2)
    config = with_dlvm(stage2_epochs=1, stage2="finetune").model_copy(update={"epochs": 1})
    fed, _ = federation(data, config)
    fed.transport.__class__ = Recording
    fed.transport.calls = []  # type: ignore[attr-defined]
    batch = max(fed.plan(1), key=lambda b: (len(b.pattern), len(b.index)))
    record = fed.run_round(0, 1, batch)
    assert ("DlvmBackward", batch.pattern) in fed.transport.calls  # type: ignore[attr-defined]
    assert record.updated == batch.pattern


# ---------------------------------------------------------------- label routing


def test_given_label_routing_then_the_active_party_holds_every_label_and_the_reserve_is_aligned(
    tmp_path: Path,
) -> None:
    """MCAR 0.4 on four parties, labels at block 0 with its label-only rows, 100 labels of which
    30 fully aligned: block 0 holds all 100 labels (also of samples whose block it misses), the
    30 are held by every party, and stage 2 trains on all 100."""
    data = prepared(tmp_path, p_miss=0.4, label_blocks=[0], keep_labels=True, aligned_labels=30)
    active = data[0].splits["train"]
    labelled = active.ids[active.labels != UNLABELLED]
    assert len(labelled) == 100  # every label, at the active party
    assert active.label_only > 0 and (active.labels[-active.label_only :] != UNLABELLED).any()
    held_by_all = set(labelled.tolist())
    for party in data:
        split = party.splits["train"]
        features = split.ids[: len(split) - split.label_only]
        held_by_all &= set(features.tolist())
    assert len(held_by_all) >= 30  # the reserve (and any labelled sample MCAR left whole)

    config = with_dlvm(stage2_epochs=1).model_copy(update={"epochs": 1})
    fed, _ = federation(data, config)
    fed.train()
    assert fed.method_stats() == {"labelled_samples": 100}
    stage2 = fed.plan(config.epochs)  # the first epoch of stage 2
    assert sum(len(b.index) for b in stage2) == 100
    assert any(0 not in b.pattern for b in stage2)  # labels of samples block 0 does not hold
    assert fed.evaluate("test").overall().samples > 0


def test_given_few_labels_without_routing_then_only_the_rows_block_0_holds(tmp_path: Path) -> None:
    """The earlier protocol, for contrast: labels live with a party's rows, so block 0 holds
    fewer than the 100 under MCAR 0.4."""
    data = prepared(tmp_path, p_miss=0.4, label_blocks=[0])
    labels = data[0].splits["train"].labels
    assert 0 < int((labels != UNLABELLED).sum()) <= 100
    assert SMALL.stage2 == "frozen"


# ---------------------------------------------------------------- Vanilla VFL


def test_vanilla_vfl_predicts_every_observed_set_at_the_active_party() -> None:
    assert method_spec("vanilla").predictors((1, 2, 3), K, ALL) == [0]
    assert method_spec("vanilla").predictors((0, 2), K, ALL) == [0]
    assert method_spec("vanilla").predictors(ALL, K, ALL) == [0]
    assert method_spec("svfl").predictors((1, 2, 3), K, ALL) is None  # its guess stays


def test_given_vanilla_vfl_when_blocks_are_missing_at_test_then_the_head_predicts_with_zeros(
    missing: list[PartyData],
) -> None:
    """Trained like svfl; at test the active party's head scores every observed set from the
    embeddings present and zeros for the rest, the same prediction each time it is asked."""
    fed, _ = method_federation(missing, method_config("vanilla", epochs=1))
    fed.train()
    preds = list(fed.predict_batches("test"))
    partial = [p for p in preds if p.present != ALL]
    assert partial and all(p.party_probs.keys() == {0} for p in partial)
    without_0 = [p for p in partial if 0 not in p.present]
    assert without_0, "MCAR should leave some test samples without block 0"
    again = list(fed.predict_batches("test"))
    for a, b in zip(preds, again, strict=True):
        np.testing.assert_array_equal(a.predicted, b.predicted)
    assert fed.evaluate("test").unscored == 0


@pytest.fixture(scope="module")
def missing(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    """Digits where each party misses 30% of the samples (test_methods' data)."""
    return _prepare(tmp_path_factory.mktemp("miss"), 0.3)
