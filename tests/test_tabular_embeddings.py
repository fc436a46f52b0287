"""Issue 45's model family for tables: numeric embeddings inside each party (piecewise-linear on
the party's training quantiles, periodic) and TabM-mini ensembles. Given a party of the bank /
retail / telecom tables: the embeddings' bins come from its training rows only; the ensemble's
members differ and its eval output is their mean; a trained federation's serving bundles predict
what the federation predicts, with each option, and a party restored from its state is the same."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tabular_tables import LABEL_COLUMN, write_tables
from test_serving_bundle import SECRET, bundle_predictions

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import federation_sources, load_table_federation
from vfl_core.errors import ConfigError
from vfl_core.model.ensemble import member_loss
from vfl_core.model.model_config import ModelConfig
from vfl_core.model.models import build_head, build_representation
from vfl_core.model.num_embeddings import fit_numeric
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

PLE = ModelConfig(embed_dim=8, hidden=(16,), num_embedding="ple", num_bins=4)


def party_data(tmp_path: Path) -> tuple[list[Path], list]:
    tables = write_tables(tmp_path / "data", n=300, share=0.8)
    paths = [tables["bank"], tables["retail"], tables["telecom"]]
    sources = federation_sources(
        paths, None, id_column="customer_id", label_column=LABEL_COLUMN, label_blocks=None
    )
    return paths, load_table_federation(sources)


def test_given_ple_when_a_party_builds_its_tower_then_the_bins_are_its_training_quantiles(
    tmp_path: Path,
) -> None:
    _, data = party_data(tmp_path)
    bank = data[0]  # yearly_income and age_years are numeric, home_region one-hot
    config = TrainConfig(epochs=1, model=PLE)
    tower = Party("party0", bank, config, secret=SECRET).models.rep(())
    train = bank.splits["train"].features
    embedded = tower.numeric.embedded.tolist()
    assert len(embedded) == 2  # the two numeric columns, not the one-hot flags
    for i, column in enumerate(embedded):
        want = np.unique(np.quantile(train[:, column].astype(np.float64), np.linspace(0, 1, 5)))
        got = torch.cat([tower.numeric.lo[i, :1], tower.numeric.hi[i]]).numpy()
        np.testing.assert_allclose(got[: len(want)], want, rtol=1e-6)

    # the test rows take no part: other test features, the same bins and weights
    test = bank.splits["test"]
    changed = replace(test, features=test.features * 0 + 1e6)
    other = replace(bank, splits={**bank.splits, "test": changed})
    again = Party("party0", other, config, secret=SECRET).models.rep(())
    for (name, a), (_, b) in zip(
        tower.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_given_ple_edges_when_encoding_then_open_ends_and_unit_bins() -> None:
    dense = np.array([[0.0], [1.0], [2.0], [3.0], [4.0]], dtype=np.float32)
    fit = fit_numeric("ple", dense, 2)
    assert fit.columns == (0,) and fit.edges == ((0.0, 2.0, 4.0),)
    config = ModelConfig(embed_dim=4, hidden=(4,), num_embedding="ple", num_bins=2)
    tower = build_representation(config, (1,), 0, numeric=fit)
    x = torch.tensor([[-2.0], [1.0], [3.0], [6.0]])
    got = tower.numeric.encode(x)[:, 0]  # (B, bins)
    want = torch.tensor([[-1.0, 0.0], [0.5, 0.0], [1.0, 0.5], [1.0, 2.0]])
    assert torch.equal(got, want)


def test_given_an_ensemble_when_built_then_members_differ_and_eval_is_their_mean() -> None:
    config = ModelConfig(embed_dim=8, hidden=(16,), ensemble=4)
    tower = build_representation(config, (5,), 3)
    head = build_head(config, 3, 4, tabular=True)
    x = torch.randn(6, 5)
    z = tower(x)  # (6, 8): 4 members of 2 values
    assert z.shape == (6, 8)
    assert not torch.equal(tower.adapter[0], tower.adapter[1])
    head.train()
    members = head(z)  # (6, 4, 3)
    assert members.shape == (6, 4, 3)
    assert all(not torch.allclose(members[:, 0], members[:, j]) for j in range(1, 4))
    head.eval()
    mean = torch.softmax(members, dim=2).mean(dim=1)
    torch.testing.assert_close(torch.softmax(head(z), dim=1), mean)
    target = torch.tensor([0, 1, 2, 0, 1, 2])
    per_member = [torch.nn.functional.cross_entropy(members[:, j], target) for j in range(4)]
    loss = member_loss(torch.nn.functional.cross_entropy)(members, target)
    torch.testing.assert_close(loss, torch.stack(per_member).mean())


def test_given_an_embed_dim_the_ensemble_cannot_split_when_built_then_config_error() -> None:
    with pytest.raises(ConfigError, match="divisible"):
        build_representation(ModelConfig(embed_dim=10, ensemble=4), (5,), 0)


@pytest.mark.parametrize(
    "model",
    [
        PLE,
        ModelConfig(embed_dim=8, hidden=(16,), num_embedding="periodic"),
        ModelConfig(embed_dim=8, hidden=(16,), num_embedding="ple", num_bins=4, ensemble=2),
    ],
    ids=["ple", "periodic", "ple-ensemble2"],
)
def test_given_the_options_when_bundles_predict_then_equal_the_federation(
    tmp_path: Path, model: ModelConfig
) -> None:
    paths, data = party_data(tmp_path)
    config = TrainConfig(epochs=2, model=model)
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, config, secret=SECRET) for d in data}
    fed = Federation(InProcessTransport(parties), config, progress=False)
    fed.align()
    fed.train()
    got, want = bundle_predictions(tmp_path, fed, parties, paths, "customer_id")
    assert len(got) > 20 and got.shape[1] == 2
    np.testing.assert_allclose(got, want, atol=1e-5)
    # a party restarted from its state (a checkpoint's) takes the bins and members back as saved
    for party in parties.values():
        restored = Party(party.party_id, party.data, config, secret=SECRET)
        restored.load_state_dict(party.state_dict())
        np.testing.assert_array_equal(restored.parameters_vector(), party.parameters_vector())
