"""Issue 14, item 14: a run's own figures say what happened. A batch whose samples no label party
holds trains nothing and calls nobody: it is not an "incomplete" round (nobody failed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

K = 3


@pytest.mark.parametrize("method", ["laser", "svfl"])
def test_given_batches_without_label_party_when_training_then_not_counted_incomplete(
    tmp_path: Path, method: str
) -> None:
    paths = prepare_parties(
        load_digits_dataset(), tmp_path, K, [0.3] * K, [0.3] * K, 0.2, seed=0, label_blocks=[0]
    )
    model = ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))
    cfg = TrainConfig(seed=0, epochs=1, batch_size=64, method=method, model=model)
    datas = [load_party_dir(p) for p in paths]
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=b"s") for d in datas}
    records: list[RoundRecord] = []
    fed = Federation(InProcessTransport(parties), cfg, progress=False, on_round=records.append)
    fed.align()
    [summary] = fed.train()

    untrainable = [r for r in records if not r.present]
    assert untrainable, "the data must have batches that cannot train"
    # every party answers in process: no round is incomplete, whatever its observed set
    assert summary.incomplete_rounds == 0
