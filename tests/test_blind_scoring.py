"""Evaluation the coordinator cannot pair with its scores (issue 32; vfl_core.inference.blind).

With an encrypted relay the heads' evaluation probabilities go to the label parties (sealed, over
gRPC: tests/test_relay_grpc.py and tests/test_relay_servers.py), which combine them as the
coordinator would have and score them. In process, for every combination rule (the heads', the
ensemble's vote, the combinatorial subset, standard VFL's random guess for a missing block) and
with every party holding labels: the coordinator's Score calls hold no per-row prediction, and
the metrics are the plaintext run's, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_dataset, load_diabetes_dataset
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


def _evaluated(
    dirs: list[Path], method: str, encrypt: bool, eval_batch_size: int = 512
) -> tuple[Any, _Recorder]:
    model = ModelConfig(representation="mlp", hidden=(16,), embed_dim=8)
    train = TrainConfig(
        seed=0,
        epochs=1,
        batch_size=128,
        eval_batch_size=eval_batch_size,
        model=model,
        method=method,
        encrypt_relay=encrypt,
        # exact rounds in both runs (the encrypted relay keeps them; unset, the plain run on
        # tables would train with staleness): the same model, so the same sums
        staleness=0,
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
        assert not call.predictions and not call.scores and call.blind
    assert all(c.seal_for == (0, 1, 2) for c in coordinator.predicts)
    if method == "svfl":  # the random guesses for missing blocks: drawn by the label party
        assert any(b.guess for c in coordinator.scores for b in c.blind)


@pytest.mark.parametrize("method", ["laser", "svfl"])
def test_given_an_encrypted_relay_when_evaluating_then_each_answer_covers_a_whole_observed_set(
    party_dirs: list[Path], method: str
) -> None:
    """The pure-batch leak closed: in batches of 32, every observed set of the test split spans
    several batches, and a batch whose rows are all of one class would name it; blind, the
    label party answers once per observed set, for all its rows, and the metrics stay bit for
    bit those of the batch-by-batch plaintext run."""
    plain, seen = _evaluated(party_dirs, method, encrypt=False, eval_batch_size=32)
    blind, coordinator = _evaluated(party_dirs, method, encrypt=True, eval_batch_size=32)
    assert blind == plain
    sets = {row["observed"]: row["samples"] for row in blind["rows"] if row["observed"] != "all"}
    assert len(sets) > 2 and max(sets.values()) > 32
    # control: in the clear some answer covers one batch, fewer rows than its observed set
    assert len(seen.scores) > len(sets) and min(len(c.rows) for c in seen.scores) <= 32
    assert sorted(len(c.rows) for c in coordinator.scores) == sorted(sets.values())
    for call in coordinator.scores:
        assert sum(b.size for b in call.blind) == len(call.rows)
        assert len({b.present for b in call.blind}) == 1  # one observed set per answer


def test_given_regression_and_an_encrypted_relay_when_evaluating_then_the_same_sums_bit_for_bit(
    tmp_path: Path,
) -> None:
    """Regression sums are floats: one answer per observed set adds each predictor's sums in
    batch order, as the coordinator adds the batch-by-batch answers of the plaintext run."""
    dirs = prepare_parties(load_diabetes_dataset(), tmp_path, 3, [0.2] * 3, [0.2] * 3, 0.2, seed=0)
    plain, _ = _evaluated(dirs, "laser", encrypt=False, eval_batch_size=16)
    blind, coordinator = _evaluated(dirs, "laser", encrypt=True, eval_batch_size=16)
    assert blind == plain and "rmse" in blind["rows"][-1]
    assert any(len(c.blind) > 1 for c in coordinator.scores)  # several batches in one answer


def test_given_several_blind_batches_when_scored_then_one_answer_their_sum(
    party_dirs: list[Path],
) -> None:
    """A label party answers a call of several batches with the sum of what it would have
    answered for each; sizes that do not add up to the call's rows are refused."""
    data = load_party_dir(party_dirs[0])
    train = TrainConfig(seed=0, epochs=1, encrypt_relay=True)
    party = Party("party0", data, train, secret=SECRET)
    party.check_digest = lambda *_: None  # type: ignore[method-assign]  # no plan to agree with
    rows, digest = np.arange(10), b""
    gen = np.random.default_rng(0)
    probs = gen.dirichlet(np.ones(10), size=10).astype(np.float32)
    parts = [BlindPrediction(1, {0: probs[:4]}, (0,), 0, size=4)]
    parts.append(BlindPrediction(2, {0: probs[4:]}, (0,), 4, size=6))
    whole = party.score(ScoreCall("test", rows, digest, {}, blind=tuple(parts)))
    one = party.score(ScoreCall("test", rows[:4], digest, {}, blind=tuple(parts[:1])))
    two = party.score(ScoreCall("test", rows[4:], digest, {}, blind=tuple(parts[1:])))
    assert whole.names() == {"0", "federation"}
    for name, confusion in whole.confusion.items():
        assert (confusion == one.confusion[name] + two.confusion[name]).all()
    assert whole.confusion["0"].sum() == 10
    bad = (replace(parts[0], size=3), parts[1])
    with pytest.raises(ProtocolError, match="do not add up"):
        party.score(ScoreCall("test", rows, digest, {}, blind=bad))


def test_given_a_blind_prediction_of_the_wrong_shape_when_scored_then_refused() -> None:
    rows = np.arange(4)
    good = np.full((4, 2), 0.5, np.float32)
    for heads in ({0: good[:3]}, {0: good.astype(np.float64)}, {0: good * np.nan}, {}):
        call = ScoreCall("test", rows, b"", {}, blind=(BlindPrediction(1, heads, (0,), 0, size=4),))
        with pytest.raises(ProtocolError, match="score"):
            unblinded(call, "heads", "classification", 2, 0)
    part = BlindPrediction(1, {0: good}, (0,), 0, 0.4, size=4)
    [plain] = unblinded(
        ScoreCall("test", rows, b"", {}, blind=(part,)), "heads", "classification", 2, 0
    )
    assert set(plain.predictions) == {"0", "federation"}
    assert (plain.predictions["0"] == 1).all()  # 0.5 >= the threshold 0.4
