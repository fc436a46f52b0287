"""How a training round's rows weigh in its loss (TrainConfig.round_loss): with "rows" (the
tables' default) a round of n rows of an epoch whose plan holds m rows a round on average steps
on n / m times the mean over its rows, so every row weighs the same over the epoch whatever the
size of its single-pattern batch, and the epoch's rounds weigh as many as before; with "mean",
or where m is not sent, on the mean (the runs before, bit for bit). The coordinator sends m
with every Fuse, in process and over gRPC alike (FuseRequest.mean_rows: tests/test_wire.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_party import BATCH, CONFIG, INDEX, align, embed_calls, make_parties, prepared

from vfl_core.data.party_dir import PartyData
from vfl_core.methods.laser.party_steps import row_weight
from vfl_core.protocol import FuseCall, FuseResult
from vfl_core.training.laser_round import LaserRound


@pytest.fixture(scope="module")
def datas(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    return prepared(tmp_path_factory.mktemp("digits_rows"), None)


def _fused(datas: list[PartyData], round_loss: str, mean_rows: float, k: int = 1) -> FuseResult:
    """Party k's Fuse of one round of BATCH rows, told the epoch's `mean_rows` a round."""
    parties = make_parties(datas, CONFIG.model_copy(update={"round_loss": round_loss}))
    al = align(parties)
    emb = {b: parties[b].embed(c) for b, c in embed_calls(al, parties, 0, INDEX).items()}
    others = {b: e for b, e in emb.items() if b != k}
    return parties[k].fuse(FuseCall(0, 0, others, mean_rows=mean_rows))


def test_given_a_short_round_when_rows_weigh_then_its_gradients_are_its_share_of_a_round(
    datas: list[PartyData],
) -> None:
    mean = _fused(datas, "mean", 4 * BATCH)
    rows = _fused(datas, "rows", 4 * BATCH)  # 16 rows where a round holds 64: a quarter
    assert rows.loss == mean.loss  # the loss said is the mean over the round's rows
    assert mean.grads.keys() == rows.grads.keys() == {0, 2, 3}
    for b in mean.grads:
        assert np.abs(mean.grads[b]).max() > 0
        np.testing.assert_allclose(rows.grads[b], mean.grads[b] / 4, rtol=1e-5, atol=1e-9)


def test_given_an_average_round_or_nothing_sent_when_rows_weigh_then_the_mean_bit_for_bit(
    datas: list[PartyData],
) -> None:
    mean = _fused(datas, "mean", 0)
    for mean_rows in (BATCH, 0):  # an average round; a coordinator that does not send it
        rows = _fused(datas, "rows", mean_rows)
        assert rows.loss == mean.loss
        for b in mean.grads:
            np.testing.assert_array_equal(rows.grads[b], mean.grads[b])


def test_row_weight_is_the_rounds_rows_over_the_epochs_mean_under_rows_only() -> None:
    assert row_weight("rows", 16, 64.0) == 0.25
    assert row_weight("rows", 86, 60.6) == 86 / 60.6  # a full batch of an epoch of short ones
    assert row_weight("rows", 16, 0.0) == 1.0  # not sent
    assert row_weight("mean", 16, 64.0) == 1.0


def test_given_a_plan_when_the_coordinator_calls_fuse_then_it_sends_the_epochs_mean_rows(
    tmp_path: Path,
) -> None:
    """The engine's Fuse calls carry their epoch's plan's mean rows a round, so that over an
    epoch the rounds' weights (n / mean) sum to its number of rounds, as the mean's do."""
    from tabular_tables import write_tables
    from test_linear_lane import LANE, _trained

    paths = write_tables(tmp_path / "data", n=300, share=0.8)
    sent: list[tuple[int, int, float]] = []
    original = LaserRound._fuse_call

    def spy(self: LaserRound, k: int, round_id: int, epoch: int, *rest: object) -> FuseCall:
        call = original(self, k, round_id, epoch, *rest)
        sent.append((epoch, len(rest[-1].index), call.mean_rows))  # rest[-1]: the batch
        return call

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LaserRound, "_fuse_call", spy)
        fed, _ = _trained([paths["bank"], paths["retail"], paths["telecom"]], LANE)
    for epoch in {e for e, _, _ in sent}:
        plan = fed.train_rows.plan(epoch)
        labelled = [len(b.index) for b in plan if 0 in b.pattern or b.label_only]
        mean = sum(labelled) / len(labelled)
        rounds = [(n, m) for e, n, m in sent if e == epoch]
        assert {m for _, m in rounds} == {mean}
        assert len({n for n, _ in rounds}) > 1  # short rounds among them
        assert sum(n / m for n, m in rounds) == pytest.approx(len(rounds))


def test_given_auto_when_resolved_then_rows_on_tables_and_the_mean_on_images_and_stages() -> None:
    from vfl_core.auto_rounds import resolve
    from vfl_core.config import TrainConfig

    assert resolve(TrainConfig(), tabular=True, quiet=True).round_loss == "rows"
    assert resolve(TrainConfig(), tabular=False, quiet=True).round_loss == "mean"
    assert resolve(TrainConfig(method="dvfl"), tabular=True, quiet=True).round_loss == "mean"
    for given in ("rows", "mean"):
        assert resolve(TrainConfig(round_loss=given), False, quiet=True).round_loss == given
