"""Evaluation by set of parties (vfl_core.inference.subsets, Federation.evaluate(blocks=...)) over
the
in-process transport: only the chosen parties are called, the result equals the evaluation with
the other parties dead, and samples none of them holds are unscored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.inference.subsets import evaluate_subsets, observed_subsets
from vfl_core.protocol import EmbedCall, PredictCall, ScoreCall
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.liveness import DOWN, UP
from vfl_core.training.party import Party

K = 4
SECRET = b"subsets-test"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Recording(InProcessTransport):
    """Counts which blocks receive inference calls; blocks in `dead` never answer them."""

    def __init__(self, parties: dict[int, Party]) -> None:
        super().__init__(parties)
        self.called: set[int] = set()
        self.dead: set[int] = set()

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        if not any(c.train for c in calls.values()):
            self.called |= set(calls)
        return super().embed({b: c for b, c in calls.items() if b not in self.dead})

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        self.called |= set(calls)
        return super().predict(calls)

    def score(self, block: int, call: ScoreCall) -> dict[str, np.ndarray] | None:
        self.called.add(block)
        return super().score(block, call)


def prepared(root: Path, label_blocks: list[int] | None = None) -> list[PartyData]:
    out = root / ("all" if label_blocks is None else "labels0")
    paths = prepare_parties(
        load_digits_dataset(), out, K, [0.1] * K, [0.3] * K, 0.2, 0, label_blocks=label_blocks
    )
    return [load_party_dir(p) for p in paths]


def trained(datas: list[PartyData]) -> tuple[Federation, Recording]:
    cfg = TrainConfig(
        seed=0,
        epochs=1,
        batch_size=128,
        eval_batch_size=128,
        model=ModelConfig(representation="mlp", embed_dim=4, hidden=(8,)),
    )
    parties = {d.meta.block: Party(f"p{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    transport = Recording(parties)
    fed = Federation(transport, cfg, progress=False, down_after=1)
    fed.align()
    fed.train()
    return fed, transport


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Federation, Recording]:
    return trained(prepared(tmp_path_factory.mktemp("subsets")))


def test_given_k_parties_when_listing_subsets_then_all_up_to_six_else_leave_one_out() -> None:
    four = observed_subsets([3, 1, 0, 2])
    assert len(four) == 15 == len(set(four))
    assert four[0] == (0, 1, 2, 3) and four[-1] == (3,)
    assert [len(s) for s in four] == sorted((len(s) for s in four), reverse=True)
    assert len(observed_subsets(range(6))) == 63
    seven = observed_subsets(range(7))
    assert seven[0] == tuple(range(7))
    assert seven[1:] == [tuple(b for b in range(7) if b != d) for d in range(7)]


def test_given_subset_when_evaluating_then_only_its_parties_are_called_and_others_unscored(
    federation: tuple[Federation, Recording],
) -> None:
    fed, transport = federation
    al = fed.alignments["test"]
    for subset in [(0, 1, 2, 3), (1, 3), (2,)]:
        transport.called.clear()
        report = fed.evaluate("test", blocks=subset)
        assert transport.called == set(subset)
        held = sum(len(keys) for p, keys in al.patterns().items() if set(p) & set(subset))
        assert report.overall().samples == held
        assert report.unscored == len(al) - held
        # every observed set of the report is inside the subset
        assert all(set(p) <= set(subset) for p in report.by_pattern)
    assert all(fed.liveness.state[b] == UP for b in range(K))


def test_given_subsets_when_evaluated_then_full_set_is_the_plain_evaluation(
    federation: tuple[Federation, Recording],
) -> None:
    fed, _ = federation
    results = evaluate_subsets(fed, "test")
    assert [r.blocks for r in results] == observed_subsets(range(K))
    plain = fed.evaluate("test").overall()
    full = results[0]
    assert (full.samples, full.unscored) == (plain.samples, 0)
    assert full.accuracy == pytest.approx(plain.accuracy)
    assert full.f1 == pytest.approx(plain.f1)
    assert full.to_json()["blocks"] == [0, 1, 2, 3]
    # with 30% of the test blocks missing, single parties predict far fewer samples
    assert all(r.unscored > 0 for r in results if len(r.blocks) == 1)


def test_given_party_left_out_when_evaluating_then_same_as_that_party_dead(
    tmp_path: Path,
) -> None:
    fed, transport = trained(prepared(tmp_path))
    without = fed.evaluate("test", blocks=(0, 1, 2))
    transport.dead = {3}
    dead = fed.evaluate("test")
    assert fed.liveness.state[3] != UP  # the dead party was noticed ...
    assert without.overall() == dead.overall()  # ... and the metrics are the same
    assert without.unscored == dead.unscored > 0
    assert without.to_json() == dead.to_json()


def test_given_party_marked_down_when_evaluating_subsets_then_sets_of_the_others_only(
    tmp_path: Path,
) -> None:
    fed, transport = trained(prepared(tmp_path))
    transport.dead = {2}
    fed.evaluate("test")  # the engine notices and marks it down
    assert fed.liveness.state[2] == DOWN
    transport.called.clear()
    results = evaluate_subsets(fed, "test")
    assert [r.blocks for r in results] == observed_subsets([0, 1, 3])
    assert 2 not in transport.called


def test_given_feature_only_parties_when_evaluating_them_alone_then_nothing_is_scored(
    tmp_path: Path,
) -> None:
    fed, transport = trained(prepared(tmp_path, label_blocks=[0]))
    results = {r.blocks: r for r in evaluate_subsets(fed, "test")}
    al = fed.alignments["test"]
    assert results[(1, 2, 3)].samples == 0
    assert results[(1, 2, 3)].unscored == len(al)
    with_label = sum(len(k) for p, k in al.patterns().items() if 0 in p)
    assert results[(0, 1)].samples == with_label
    transport.called.clear()
    fed.evaluate("test", blocks=(1, 2))
    assert 0 not in transport.called  # the label party is not asked to score for others
