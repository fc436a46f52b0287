"""The round engine over the in-process transport: determinism in the seed, dead and garbage
parties (DESIGN.md invariant 5), liveness, and evaluation by observed set."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

from vfl_coordinator.registry import Registry
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    TrainCall,
    disagreement,
)
from vfl_core.training import pipeline
from vfl_core.training.engine import Callbacks, Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.liveness import DOWN, UP
from vfl_core.training.party import Party

K = 4
SECRET = b"engine-test"
EMBED_DIM = 8


def config(seed: int, epochs: int = 1, **kwargs: object) -> TrainConfig:
    return TrainConfig(
        seed=seed,
        epochs=epochs,
        batch_size=64,
        eval_batch_size=128,
        lr=1e-2,
        model=ModelConfig(representation="mlp", embed_dim=EMBED_DIM, hidden=(16,)),
        **kwargs,
    )


_CACHE: dict[tuple, list[PartyData]] = {}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine")


def digits_parties(
    root: Path, p_train: float = 0.0, p_test: float = 0.0, label_blocks: list[int] | None = None
) -> list[PartyData]:
    key = (p_train, p_test, tuple(label_blocks) if label_blocks else None)
    if key not in _CACHE:
        paths = prepare_parties(
            load_digits_dataset(),
            root / f"v{len(_CACHE)}",
            num_blocks=K,
            p_miss_train=[p_train] * K,
            p_miss_test=[p_test] * K,
            test_fraction=0.2,
            seed=0,
            label_blocks=label_blocks,
        )
        _CACHE[key] = [load_party_dir(p) for p in paths]
    return _CACHE[key]


def build(
    datas: list[PartyData],
    cfg: TrainConfig,
    wrap: Callable[[InProcessTransport], object] | None = None,
    **kwargs: object,
) -> tuple[Federation, dict[int, Party], list[RoundRecord]]:
    parties = {d.meta.block: Party(f"p{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    transport = InProcessTransport(parties)
    records: list[RoundRecord] = []
    fed = Federation(
        wrap(transport) if wrap else transport,
        cfg,
        progress=False,
        on_round=records.append,
        **kwargs,
    )
    fed.align()
    return fed, parties, records


class Wrapper:
    """A transport that passes everything through except what a subclass changes."""

    def __init__(self, inner: InProcessTransport) -> None:
        self.inner = inner

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def train(self, calls: dict[int, TrainCall]):
        """Pipelined calls through this wrapper's own phases (what a subclass changes)."""
        return pipeline.by_phase(self, calls)


class DeadParty(Wrapper):
    """Block `block` neither receives calls nor answers while `dead(round_id)` holds."""

    def __init__(self, inner: InProcessTransport, block: int, dead: Callable[[int], bool]):
        super().__init__(inner)
        self.block, self.dead = block, dead
        self.embed_calls: list[int] = []  # rounds in which the engine called the block

    def _alive(self, calls: dict, round_id: int) -> dict:
        return {b: c for b, c in calls.items() if b != self.block or not self.dead(round_id)}

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        if self.block in calls and calls[self.block].train:
            self.embed_calls.append(calls[self.block].round_id)
        round_id = next(iter(calls.values())).round_id if calls else -1
        train = any(c.train for c in calls.values())
        return self.inner.embed(self._alive(calls, round_id) if train else calls)

    def fuse(self, calls: dict[int, FuseCall]) -> dict[int, FuseResult]:
        round_id = next(iter(calls.values())).round_id if calls else -1
        return self.inner.fuse(self._alive(calls, round_id))

    def backward(self, calls: dict[int, BackwardCall]) -> set[int]:
        round_id = next(iter(calls.values())).round_id if calls else -1
        return self.inner.backward(self._alive(calls, round_id))


class GarbageEmbeddings(Wrapper):
    """Replaces block `block`'s training embeddings with `garbage(answer)` in `rounds`."""

    def __init__(self, inner, block: int, rounds: set[int], garbage: Callable) -> None:
        super().__init__(inner)
        self.block, self.rounds, self.garbage = block, rounds, garbage

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        out = self.inner.embed(calls)
        call = calls.get(self.block)
        if call is not None and call.train and call.round_id in self.rounds and self.block in out:
            out[self.block] = self.garbage(out[self.block])
        return out


class GarbageGradients(Wrapper):
    """Head `block` sends NaN gradients in `rounds`."""

    def __init__(self, inner, block: int, rounds: set[int]) -> None:
        super().__init__(inner)
        self.block, self.rounds = block, rounds

    def fuse(self, calls: dict[int, FuseCall]) -> dict[int, FuseResult]:
        out = self.inner.fuse(calls)
        call = calls.get(self.block)
        if call is not None and call.round_id in self.rounds and self.block in out:
            good = out[self.block]
            out[self.block] = FuseResult(
                good.loss, {b: np.full_like(g, np.nan) for b, g in good.grads.items()}
            )
        return out


class Silent(Wrapper):
    """Block `block` never answers an Embed call (a party that died after training)."""

    def __init__(self, inner, block: int) -> None:
        super().__init__(inner)
        self.block = block

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        return self.inner.embed({b: c for b, c in calls.items() if b != self.block})


def nan_answer(a: np.ndarray) -> np.ndarray:
    bad = a.copy()
    bad[0, 0] = np.nan
    return bad


# ---------------------------------------------------------------- determinism


def run(root: Path, seed: int, **kwargs: object) -> tuple[dict[int, np.ndarray], list, dict]:
    datas = digits_parties(root, p_train=0.2, p_test=0.2)
    fed, parties, records = build(datas, config(seed, epochs=2, **kwargs))
    fed.train()
    report = fed.evaluate()
    losses = [(r.round_id, r.pattern, r.present, r.losses) for r in records]
    return {b: p.parameters_vector() for b, p in parties.items()}, losses, report.to_json()


@pytest.mark.parametrize("balance", ["none", "resample"])
def test_given_same_seed_when_training_twice_then_identical_parameters_losses_and_metrics(
    data_root: Path, balance: str
) -> None:
    params_a, losses_a, report_a = run(data_root, 5, balance=balance)
    params_b, losses_b, report_b = run(data_root, 5, balance=balance)
    assert losses_a == losses_b
    assert all(np.isfinite(v) for *_, losses in losses_a for v in losses.values())
    for b in params_a:
        np.testing.assert_array_equal(params_a[b], params_b[b])
    assert report_a == report_b
    params_c, losses_c, _ = run(data_root, 6, balance=balance)
    assert losses_c != losses_a
    for b in params_a:
        assert not np.array_equal(params_a[b], params_c[b])


# ---------------------------------------------------------------- dead and garbage parties


def test_given_dead_party_when_training_then_rounds_run_without_it_and_liveness_follows(
    data_root: Path,
) -> None:
    datas = digits_parties(data_root)
    dead_from, dead_until = 5, 30  # block 2 is dead in rounds 5..29
    wrappers: list[DeadParty] = []

    def wrap(t: InProcessTransport) -> DeadParty:
        wrappers.append(DeadParty(t, 2, lambda r: dead_from <= r < dead_until))
        return wrappers[0]

    fed, parties, records = build(datas, config(0, epochs=2), wrap, down_after=3, retry_every=10)
    snapshots: dict[int, np.ndarray] = {}
    fed.observers[:] = [
        Callbacks(
            round=lambda r: (
                records.append(r),
                snapshots.__setitem__(r.round_id, parties[2].parameters_vector()),
            )
        )
    ]
    fed.train()
    assert len(records) >= 40
    # Three misses (rounds 5, 6, 7) mark it down; retries at rounds 17, 27 fail, 37 succeeds.
    moves = [(t.round_id, t.block, t.old, t.new) for t in fed.liveness.transitions]
    assert moves == [(7, 2, UP, DOWN), (37, 2, DOWN, UP)]
    assert fed.liveness.state[2] == UP
    not_called = set(range(8, 17)) | set(range(18, 27)) | set(range(28, 37))
    called = set(wrappers[0].embed_calls)
    assert called.isdisjoint(not_called)
    assert called >= set(range(len(records))) - not_called
    for r in records:
        without = dead_from <= r.round_id < 37
        assert (2 in r.present) != without, r.round_id
        assert r.present == ((0, 1, 3) if without else (0, 1, 2, 3))
        assert sorted(r.losses) == list(r.present)  # the survivors trained every round
        assert r.updated == r.present
    # The dead party's weights stood still while it was away, and moved again after.
    np.testing.assert_array_equal(snapshots[dead_from - 1], snapshots[36])
    assert not np.array_equal(snapshots[36], snapshots[len(records) - 1])


@pytest.mark.parametrize(
    "garbage",
    [
        nan_answer,
        lambda a: a[:-1],  # wrong batch size
        lambda a: np.zeros((a.shape[0], EMBED_DIM + 1), np.float32),  # wrong width
        lambda a: a.astype(np.float64),  # wrong dtype
    ],
    ids=["nan", "rows", "width", "dtype"],
)
def test_given_garbage_embeddings_when_training_then_party_left_out_and_training_continues(
    data_root: Path, garbage: Callable
) -> None:
    datas = digits_parties(data_root)
    bad_rounds = {3, 4}
    fed, parties, records = build(
        datas, config(0), lambda t: GarbageEmbeddings(t, 1, bad_rounds, garbage), down_after=3
    )
    fed.train()
    for r in records:
        expected = (0, 2, 3) if r.round_id in bad_rounds else (0, 1, 2, 3)
        assert r.present == expected and r.updated == expected
        assert all(np.isfinite(v) for v in r.losses.values())
    assert fed.liveness.state[1] == UP and not fed.liveness.transitions
    for p in parties.values():
        assert np.isfinite(p.parameters_vector()).all()
    assert fed.evaluate().overall().samples == len(fed.alignments["test"])


def test_given_garbage_gradients_when_training_then_that_head_is_dropped_from_the_round(
    data_root: Path,
) -> None:
    datas = digits_parties(data_root)
    fed, parties, records = build(
        datas, config(0), lambda t: GarbageGradients(t, 3, {2}), down_after=3
    )
    fed.train()
    assert sorted(records[2].losses) == [0, 1, 2]
    assert all(sorted(r.losses) == [0, 1, 2, 3] for r in records if r.round_id != 2)
    assert records[2].updated == (0, 1, 2, 3)
    for p in parties.values():
        assert np.isfinite(p.parameters_vector()).all()


# ---------------------------------------------------------------- evaluation


def labels_of(parties: dict[int, Party], fed: Federation, index: np.ndarray, pattern) -> np.ndarray:
    al = fed.alignments["test"]
    block = next(b for b in pattern if parties[b].g is not None)
    return parties[block].data.splits["test"].labels[al.rows_of(block, index)]


def test_given_missing_test_blocks_when_evaluating_then_rows_by_observed_set_match_hand_count(
    data_root: Path,
) -> None:
    datas = digits_parties(data_root, p_test=0.3)
    fed, parties, _ = build(datas, config(1))
    fed.train()
    report = fed.evaluate()
    al = fed.alignments["test"]
    groups = al.patterns()
    rows = {r.observed: r for r in report.rows()}
    assert set(rows) == {",".join(map(str, p)) for p in groups} | {"all"}
    assert report.unscored == 0
    for pattern, keys in groups.items():
        assert rows[",".join(map(str, pattern))].samples == len(keys)
    assert rows["all"].samples == len(al)
    # Recompute every row from the raw predictions and the labels.
    correct: dict[tuple, float] = {}
    fed_correct: dict[tuple, int] = {}
    per_party: dict[tuple, dict[int, tuple[list, list]]] = {}
    for pred in fed.predict_batches("test"):
        truth = labels_of(parties, fed, pred.index, pred.pattern)
        hits = [p.argmax(axis=1) == truth for p in pred.party_probs.values()]
        correct[pred.present] = correct.get(pred.present, 0.0) + float(np.mean(hits, axis=0).sum())
        fed_hits = int((pred.federation.argmax(axis=1) == truth).sum())
        fed_correct[pred.present] = fed_correct.get(pred.present, 0) + fed_hits
        for k, p in pred.party_probs.items():
            for key in (pred.present, "all"):
                t, y = per_party.setdefault(key, {}).setdefault(k, ([], []))
                t.extend(truth)
                y.extend(p.argmax(axis=1))
    for pattern in groups:
        row = rows[",".join(map(str, pattern))]
        assert row.accuracy == pytest.approx(correct[pattern] / len(groups[pattern]), abs=1e-12)
        assert row.federation_accuracy == pytest.approx(
            fed_correct[pattern] / len(groups[pattern]), abs=1e-12
        )
    assert rows["all"].accuracy == pytest.approx(sum(correct.values()) / len(al), abs=1e-12)
    for key, parties_scores in per_party.items():
        name = key if key == "all" else ",".join(map(str, key))
        f1s = [
            f1_score(t, y, labels=np.unique(t), average="macro") for t, y in parties_scores.values()
        ]
        assert rows[name].f1 == pytest.approx(float(np.mean(f1s)), abs=1e-12)


def test_given_label_less_pattern_when_evaluating_then_its_samples_are_unscored(
    data_root: Path,
) -> None:
    datas = digits_parties(data_root, p_test=0.5, label_blocks=[0])
    fed, _, _ = build(datas, config(2))
    fed.train()
    report = fed.evaluate()
    al = fed.alignments["test"]
    without_head = sum(len(k) for p, k in al.patterns().items() if 0 not in p)
    assert without_head > 0
    assert report.unscored == without_head
    assert all(0 in pattern for pattern in report.by_pattern)
    assert report.overall().samples == len(al) - without_head
    assert report.to_json()["unscored"] == without_head


def test_given_dead_party_at_inference_when_evaluating_then_observed_set_shrinks(
    data_root: Path,
) -> None:
    datas = digits_parties(data_root)
    fed, _, _ = build(datas, config(0), down_after=1)
    fed.train()
    fed.transport = Silent(fed.transport, 3)
    report = fed.evaluate()
    assert set(report.by_pattern) == {(0, 1, 2)}
    assert report.overall().samples == len(fed.alignments["test"])


def test_given_feature_party_with_other_class_count_when_joining_then_error_names_the_option() -> (
    None
):
    class Infos:  # a 10-class label party and a feature-only party left at the 2-class default
        def infos(self) -> dict[int, PartyInfo]:
            return {
                0: PartyInfo("bank", 0, 2, "table", (5,), 10, True),
                1: PartyInfo("retail", 1, 2, "table", (3,), 2, False),
            }

    with pytest.raises(ConfigError, match=r"start retail with vfl-client --num-classes N"):
        Federation(Infos(), TrainConfig())  # type: ignore[arg-type]
    registry = Registry(2)  # and the coordinator refuses the registration, saying the same
    bank, retail = Infos().infos().values()
    registry.register(bank, "127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"num_classes=2 .* start retail with vfl-client --num"):
        registry.register(retail, "127.0.0.1:2")


def test_given_parties_differing_in_two_facts_then_disagreement_names_first_field() -> None:
    bank = PartyInfo("bank", 0, 3, "table", (5,), 10, True)
    shop = PartyInfo("shop", 1, 3, "table", (3,), 10, False)
    ins = PartyInfo("ins", 2, 3, "table", (3,), 2, False, task="regression")
    assert disagreement([bank, shop]) is None
    assert disagreement([bank, shop, ins]) == ("task", bank, ins)  # task comes before classes
