"""The registry of method specs: one frozen spec per method keyed by its name, unknown names
refused with one line wherever a method is named, and the round-program hook through which a
method with phases of its own (not Embed/Fuse/Backward) takes over training and prediction."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError
from vfl_core.methods.registry import METHOD_NAMES, METHODS, REGISTRY, method_spec
from vfl_core.methods.spec import MethodSpec
from vfl_core.training.alignment import Batch
from vfl_core.training.engine import Federation, PredictionBatch, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

K = 3
SECRET = b"specs-test"
MODEL = ModelConfig(representation="mlp", hidden=(8,), embed_dim=4)


def test_given_the_registry_when_listed_then_one_frozen_spec_per_method_keyed_by_name() -> None:
    assert METHODS == (
        "laser",
        "local",
        "ensemble",
        "svfl",
        "vanilla",  # the DLVM paper's Vanilla VFL: svfl zero-imputing at inference (issue 30)
        "combinatorial",
        "plug",
        "zerofill",
        "stale",
        "dvfl",
        "dlvm",
    )
    assert tuple(REGISTRY) == METHODS
    for name, spec in REGISTRY.items():
        assert isinstance(spec, MethodSpec) and spec.name == name
        assert METHOD_NAMES[name] == spec.display_name != ""
        assert method_spec(name) is spec
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.fusion = "mean"  # type: ignore[misc]
    with pytest.raises(TypeError):
        REGISTRY["mine"] = REGISTRY["laser"]  # type: ignore[index]
    assert TrainConfig().method == "laser"


def test_given_an_unknown_method_name_when_looked_up_or_configured_then_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown method 'bogus'; choose from laser, local"):
        method_spec("bogus")
    with pytest.raises(ValidationError, match=r"unknown method 'bogus'; choose from laser"):
        TrainConfig(method="bogus")
    for name in METHODS:
        assert TrainConfig(method=name).method == name


def test_given_an_unchecked_config_with_an_unknown_method_when_a_party_is_built_then_refused(
    digits: list[PartyData],
) -> None:
    # Bypassing validation must not fall back to some method's behaviour.
    config = TrainConfig.model_construct(**{**TrainConfig().__dict__, "method": "bogus"})
    with pytest.raises(ConfigError, match="unknown method 'bogus'"):
        Party("p0", digits[0], config, secret=SECRET)


def test_given_an_unknown_method_on_the_command_line_when_simulating_then_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["simulate", "--method", "bogus", "--epochs", "0"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        "error: invalid method: unknown method 'bogus'; choose from laser, local, ensemble, "
        "svfl, vanilla, combinatorial, plug, zerofill, stale, dvfl, dlvm"
    ]


# ---------------------------------------------------------------- the round-program hook


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    root: Path = tmp_path_factory.mktemp("digits")
    paths = prepare_parties(load_digits_dataset(), root, K, [0.2] * K, [0.2] * K, 0.2, seed=0)
    return [load_party_dir(p) for p in paths]


@dataclasses.dataclass
class Recorder:
    """A round program that records what the engine hands it and calls no party."""

    rounds: list[tuple[int, int, tuple[int, ...]]] = dataclasses.field(default_factory=list)
    predicted: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)

    def train_round(self, fed: Federation, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        self.rounds.append((round_id, epoch, batch.pattern))
        return RoundRecord(round_id, epoch, batch.pattern, batch.pattern, {0: 1.5}, ())

    def predict_batch(
        self,
        fed: Federation,
        split: str,
        batch: Batch,
        request: int,
        blocks: Collection[int] | None,
    ) -> PredictionBatch:
        self.predicted.append((split, request, len(batch.index)))
        guess = np.zeros(len(batch.index), dtype=np.int64)
        probs = np.eye(10, dtype=np.float32)[guess]
        return PredictionBatch(batch.index, batch.pattern, batch.pattern, {}, probs, guess)


def test_given_a_spec_with_a_round_program_when_training_and_predicting_then_the_engine_runs_it(
    digits: list[PartyData],
) -> None:
    train = TrainConfig(epochs=2, batch_size=64, model=MODEL)
    parties = {d.meta.block: Party(f"p{d.meta.block}", d, train, secret=SECRET) for d in digits}
    before = {b: p.parameters_vector() for b, p in parties.items()}
    fed = Federation(InProcessTransport(parties), train, progress=False)
    program = Recorder()
    fed.spec = dataclasses.replace(fed.spec, program=program)
    fed.align()
    summaries = fed.train()

    plans = [fed.plan(e) for e in range(2)]
    assert [r[:2] for r in program.rounds] == [
        (i + e * len(plans[0]), e) for e in range(2) for i in range(len(plans[e]))
    ]
    assert [r[2] for r in program.rounds] == [b.pattern for plan in plans for b in plan]
    assert [s.mean_loss for s in summaries] == [1.5, 1.5]  # the program's records count
    for b, party in parties.items():  # no Embed, Fuse or Backward reached a party
        assert party.last_round == -1
        np.testing.assert_array_equal(party.parameters_vector(), before[b])

    preds = list(fed.predict_batches("test"))
    assert [p[2] for p in program.predicted] == [len(p.index) for p in preds]
    assert [p[1] for p in program.predicted] == list(range(len(preds)))  # request ids
    assert all((p.predicted == 0).all() for p in preds)
