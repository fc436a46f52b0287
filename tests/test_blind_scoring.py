"""Evaluation the coordinator cannot pair with its scores (issue 32; vfl_core.inference.blind).

With an encrypted relay the heads' evaluation probabilities go to the label parties (sealed, over
gRPC: tests/test_relay_grpc.py and tests/test_relay_servers.py), which combine them as the
coordinator would have and score them. In process, for every combination rule (the heads', the
ensemble's vote, the combinatorial subset, standard VFL's random guess for a missing block) and
with every party holding labels: the coordinator's Score calls hold no per-row prediction, and
the metrics are the plaintext run's, bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ProtocolError
from vfl_core.inference.blind import unblinded
from vfl_core.protocol import BlindPrediction, PredictCall, ScoreCall, ScoreResult, Transport
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SECRET = b"blind-test"


@pytest.fixture(scope="module")
def party_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("blind-data")
    return prepare_parties(load_dataset("digits"), out, 3, [0.2] * 3, [0.2] * 3, 0.2, seed=0)


class _Recorder:
    """The coordinator's view of an evaluation: every Predict and Score call it makes."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.predicts: list[PredictCall] = []
        self.scores: list[ScoreCall] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        self.predicts += calls.values()
        return self._inner.predict(calls)

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        self.scores.append(call)
        return self._inner.score(block, call)


def _evaluated(dirs: list[Path], method: str, encrypt: bool) -> tuple[str, _Recorder]:
    model = ModelConfig(representation="mlp", hidden=(16,), embed_dim=8)
    train = TrainConfig(
        seed=0, epochs=1, batch_size=128, model=model, method=method, encrypt_relay=encrypt
    )
    data = [load_party_dir(d) for d in dirs]
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}
    recorder = _Recorder(InProcessTransport(parties))
    fed = Federation(recorder, train, progress=False)  # type: ignore[arg-type]
    fed.align()
    fed.train()
    recorder.predicts.clear()
    recorder.scores.clear()
    return fed.evaluate("test").to_json(), recorder


@pytest.mark.parametrize("method", ["laser", "ensemble", "combinatorial", "svfl"])
def test_given_an_encrypted_relay_when_evaluating_then_no_prediction_and_the_same_metrics(
    party_dirs: list[Path], method: str
) -> None:
    plain, seen = _evaluated(party_dirs, method, encrypt=False)
    blind, coordinator = _evaluated(party_dirs, method, encrypt=True)
    assert blind == plain  # every metric of every observed set, bit for bit
    assert all(c.predictions for c in seen.scores)  # control: in the clear it knows them all
    assert coordinator.scores and coordinator.predicts
    for call in coordinator.scores:
        assert not call.predictions and not call.scores and call.blind is not None
    assert all(c.seal_for == (0, 1, 2) for c in coordinator.predicts)
    if method == "svfl":  # the random guesses for missing blocks: drawn by the label party
        assert any(c.blind is not None and c.blind.guess for c in coordinator.scores)


def test_given_a_blind_prediction_of_the_wrong_shape_when_scored_then_refused() -> None:
    rows = np.arange(4)
    good = np.full((4, 2), 0.5, np.float32)
    for heads in ({0: good[:3]}, {0: good.astype(np.float64)}, {0: good * np.nan}, {}):
        call = ScoreCall("test", rows, b"", {}, blind=BlindPrediction(1, heads, (0,), 0))
        with pytest.raises(ProtocolError, match="score"):
            unblinded(call, "heads", "classification", 2, 0)
    call = ScoreCall("test", rows, b"", {}, blind=BlindPrediction(1, {0: good}, (0,), 0, 0.4))
    plain = unblinded(call, "heads", "classification", 2, 0)
    assert set(plain.predictions) == {"0", "federation"}
    assert (plain.predictions["0"] == 1).all()  # 0.5 >= the threshold 0.4
