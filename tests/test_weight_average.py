"""Averaged weights (TrainConfig.weight_average, vfl_core.model.weight_average): the average is
the hand-computed EMA of the live weights after each optimiser step; evaluation (an evaluation
split's Embed, Predict) runs on it while training steps the live weights; the run with it is
bit-identical in process and over gRPC; a party restored from a checkpoint resumes the same
average; off by default, where the state holds no average."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from harness import party_servers, resume_after_crash
from torch import nn

from vfl_coordinator.config import Deadlines
from vfl_coordinator.transport import GrpcTransport
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.methods.spec import SHARED
from vfl_core.model.eager_optim import EagerAdam
from vfl_core.model.weight_average import WeightAverage
from vfl_core.protocol import EmbedCall, PredictCall
from vfl_core.serving.bundle import HEAD_FILE, REPRESENTATION_FILE, write_bundle
from vfl_core.training.alignment import batch_digest
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SECRET = b"weight-average-test"


@pytest.fixture(scope="module")
def party_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("weight-average-data")
    return prepare_parties(load_dataset("digits"), out, 3, [0.1] * 3, [0.1] * 3, 0.2, seed=0)


def _config(**kw: object) -> TrainConfig:
    model = ModelConfig(representation="mlp", hidden=(16,), embed_dim=8)
    settings: dict = {"seed": 0, "epochs": 3, "batch_size": 128, "model": model, **kw}
    return TrainConfig(weight_average="ema", **settings)


def _parties(dirs: list[Path], train: TrainConfig) -> dict[int, Party]:
    data = [load_party_dir(d) for d in dirs]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}


def _trained(dirs: list[Path], train: TrainConfig) -> tuple[Federation, dict[int, Party]]:
    parties = _parties(dirs, train)
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    fed.train()
    return fed, parties


def _averages(party: Party) -> np.ndarray:
    state = party.models.state_dict()
    tensors = [
        t.reshape(-1)
        for entry in ("avg_reps", "avg_heads")
        for _, sd in sorted(state[entry].items())  # type: ignore[union-attr]
        for t in sd.values()
        if isinstance(t, torch.Tensor)
    ]
    return torch.cat(tensors).numpy()


def test_given_steps_when_averaged_then_the_hand_computed_ema() -> None:
    torch.manual_seed(0)
    module = nn.Linear(4, 3)
    opt = EagerAdam(module.parameters(), lr=0.1)
    average = WeightAverage(0.75)
    average.watch("m", module, opt)
    assert average.evaluated("m", module) is module  # no step yet: the live weights
    expected: list[torch.Tensor] | None = None
    x = torch.randn(8, 4)
    for _ in range(5):
        opt.zero_grad()
        module(x).pow(2).sum().backward()
        opt.step()
        live = [p.detach().double().clone() for p in module.parameters()]
        if expected is None:
            expected = live  # a_1 = w_1
        else:
            expected = [0.75 * a + 0.25 * w for a, w in zip(expected, live, strict=True)]
    assert expected is not None
    got = list(average.evaluated("m", module).parameters())
    for a, e in zip(got, expected, strict=True):
        torch.testing.assert_close(a.double(), e, rtol=1e-6, atol=1e-7)
    assert not any(torch.equal(a, w) for a, w in zip(got, module.parameters(), strict=True))
    assert all(not a.requires_grad for a in got)


def test_given_the_default_then_no_average_in_the_state(party_dirs: list[Path]) -> None:
    train = TrainConfig(seed=0, epochs=1)
    assert train.weight_average == "none"
    party = _parties(party_dirs, train)[0]
    assert party.models.average is None
    assert "avg_reps" not in party.models.state_dict()
    assert party.models.evaluated_rep(SHARED) is party.f


def test_given_ema_then_evaluation_embeds_and_predicts_with_the_average(
    party_dirs: list[Path],
) -> None:
    _, parties = _trained(party_dirs, _config())
    label = parties[0]
    rep, head = label.models.evaluated_rep(SHARED), label.models.evaluated_head(SHARED)
    assert rep is not label.f and head is not label.g
    assert not np.array_equal(_averages(label)[:10], label.parameters_vector()[:10])

    rows = np.arange(16)
    split = label.split("test")
    digest = batch_digest(label.alignment_keys("test")[r] for r in rows)
    sent = label.embed(EmbedCall(round_id=-1, split="test", rows=rows, digest=digest, train=False))
    x = torch.from_numpy(split.features[rows])
    with torch.no_grad():
        np.testing.assert_array_equal(sent, rep(x).numpy())
        assert not np.array_equal(sent, label.f.eval()(x).numpy())
        predicted = label.predict(PredictCall(request_id=0, embeddings={0: sent}))
        np.testing.assert_array_equal(predicted, torch.softmax(head(rep(x)), dim=1).numpy())


def test_given_ema_when_trained_over_grpc_and_in_process_then_bit_identical(
    party_dirs: list[Path],
) -> None:
    """With early stopping on, so the validation, its restore of the best epoch and the test
    evaluation all run on the averages."""
    train = _config(early_stop_patience=1)
    local_fed, local = _trained(party_dirs, train)

    remote = _parties(party_dirs, train)
    with party_servers(remote, "ema-run") as registry:
        transport = GrpcTransport(registry, "ema-run", Deadlines())
        try:
            fed = Federation(transport, train, progress=False)
            fed.align()
            fed.train()
            remote_report = fed.evaluate("test")
        finally:
            transport.close()

    for block, party in local.items():
        np.testing.assert_array_equal(remote[block].parameters_vector(), party.parameters_vector())
        np.testing.assert_array_equal(_averages(remote[block]), _averages(party))
    assert remote_report.to_json() == local_fed.evaluate("test").to_json()


def test_given_ema_when_resumed_from_a_checkpoint_then_as_the_run_that_never_stopped(
    party_dirs: list[Path],
) -> None:
    train = _config()
    data = [load_party_dir(d) for d in party_dirs]
    resume_after_crash(data, train, crash_at=9, secret=SECRET)


def test_given_ema_when_restored_then_the_average_comes_back_too(party_dirs: list[Path]) -> None:
    _, parties = _trained(party_dirs, _config(epochs=1))
    label = parties[0]
    label.keep_snapshot(label.last_round)
    kept = _averages(label)
    with torch.no_grad():
        for p in label.models.evaluated_rep(SHARED).parameters():
            p.add_(1.0)
    assert not np.array_equal(_averages(label), kept)
    assert label.restore_snapshot(label.last_round)
    np.testing.assert_array_equal(_averages(label), kept)


def test_given_a_method_with_its_own_models_then_refused() -> None:
    with pytest.raises(ValueError, match="weight-average"):
        TrainConfig(method="dvfl", weight_average="ema")


def test_given_ema_when_a_bundle_is_written_then_it_serves_the_averages(
    party_dirs: list[Path], tmp_path: Path
) -> None:
    _, parties = _trained(party_dirs, _config(epochs=1))
    label = parties[0]
    write_bundle(label, tmp_path / "bundle")
    x = torch.from_numpy(label.split("test").features[:8])
    with torch.no_grad():
        served = torch.jit.load(str(tmp_path / "bundle" / REPRESENTATION_FILE))(x)
        head = torch.jit.load(str(tmp_path / "bundle" / HEAD_FILE))(served)
        rep, g = label.models.evaluated_rep(SHARED), label.models.evaluated_head(SHARED)
        np.testing.assert_array_equal(served.numpy(), rep(x).numpy())
        np.testing.assert_array_equal(head.numpy(), g(rep(x)).numpy())
        assert not np.array_equal(served.numpy(), label.f.eval()(x).numpy())
