"""How a training round's rows weigh in its loss (TrainConfig.round_loss): with "rows" (the
default) a round of n rows from a plan of batch B steps on n / B times the mean over its rows,
so every row weighs the same over an epoch whatever the size of its single-pattern batch; with
"mean", or where the plan's batch is not sent, on the mean (the runs before, bit for bit). The
coordinator sends the plan's batch with every Fuse, in process and over gRPC alike
(FuseRequest.batch: tests/test_wire.py)."""

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


def _fused(datas: list[PartyData], round_loss: str, batch: int, k: int = 1) -> FuseResult:
    """Party k's Fuse of one round of BATCH rows, told the plan's `batch`."""
    parties = make_parties(datas, CONFIG.model_copy(update={"round_loss": round_loss}))
    al = align(parties)
    emb = {b: parties[b].embed(c) for b, c in embed_calls(al, parties, 0, INDEX).items()}
    others = {b: e for b, e in emb.items() if b != k}
    return parties[k].fuse(FuseCall(0, 0, others, batch=batch))


def test_given_a_short_round_when_rows_weigh_then_its_gradients_are_its_share_of_a_batch(
    datas: list[PartyData],
) -> None:
    mean = _fused(datas, "mean", 4 * BATCH)
    rows = _fused(datas, "rows", 4 * BATCH)  # 16 rows of a plan of 64: a quarter of a batch
    assert rows.loss == mean.loss  # the loss said is the mean over the round's rows
    assert mean.grads.keys() == rows.grads.keys() == {0, 2, 3}
    for b in mean.grads:
        assert np.abs(mean.grads[b]).max() > 0
        np.testing.assert_allclose(rows.grads[b], mean.grads[b] / 4, rtol=1e-5, atol=1e-9)


def test_given_a_whole_batch_or_no_batch_sent_when_rows_weigh_then_the_mean_bit_for_bit(
    datas: list[PartyData],
) -> None:
    mean = _fused(datas, "mean", 0)
    for batch in (BATCH, 0):  # a full round; a coordinator that does not send the batch
        rows = _fused(datas, "rows", batch)
        assert rows.loss == mean.loss
        for b in mean.grads:
            np.testing.assert_array_equal(rows.grads[b], mean.grads[b])


def test_row_weight_is_the_rounds_share_of_the_plans_batch_under_rows_only() -> None:
    assert row_weight("rows", 16, 64) == 0.25
    assert row_weight("rows", 64, 64) == 1.0
    assert row_weight("rows", 16, 0) == 1.0  # not sent
    assert row_weight("mean", 16, 64) == 1.0


def test_given_a_plan_when_the_coordinator_calls_fuse_then_it_sends_the_plans_batch(
    tmp_path: Path,
) -> None:
    """The engine's Fuse calls carry the plan's batch size (TrainConfig.batch_rows of the
    training samples), also for a round of a pattern's short last batch."""
    from tabular_tables import write_tables
    from test_linear_lane import LANE, _trained

    paths = write_tables(tmp_path / "data", n=300, share=0.8)
    sent: list[FuseCall] = []
    original = LaserRound._fuse_call

    def spy(self: LaserRound, *args: object) -> FuseCall:
        call = original(self, *args)
        sent.append(call)
        return call

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LaserRound, "_fuse_call", spy)
        fed, _ = _trained([paths["bank"], paths["retail"], paths["telecom"]], LANE)
    batch = fed.train_rows.batch_size()
    assert sent and {c.batch for c in sent} == {batch}
    assert batch == fed.config.batch_rows(len(fed.alignments["train"]), fed.tabular)


def test_given_auto_when_resolved_then_rows_on_tables_and_the_mean_on_images_and_stages() -> None:
    from vfl_core.auto_rounds import resolve
    from vfl_core.config import TrainConfig

    assert resolve(TrainConfig(), tabular=True, quiet=True).round_loss == "rows"
    assert resolve(TrainConfig(), tabular=False, quiet=True).round_loss == "mean"
    assert resolve(TrainConfig(method="dvfl"), tabular=True, quiet=True).round_loss == "mean"
    for given in ("rows", "mean"):
        assert resolve(TrainConfig(round_loss=given), False, quiet=True).round_loss == given
