"""Each baseline of the paper's Table 1 does what defines it, on small in-process federations
(digits, K = 4) and on crafted inputs: svfl, ensemble, plug, combinatorial, local; and every
method is deterministic in its seed."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch

from vfl_core.config import DvflConfig, ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.methods.combination import combine, majority_vote
from vfl_core.methods.dlvm.config import DlvmConfig
from vfl_core.methods.registry import METHODS, method_spec
from vfl_core.methods.spec import SHARED
from vfl_core.protocol import EmbedCall, FuseCall, PredictCall
from vfl_core.seeding import Stream, rng
from vfl_core.simulate import SimulationConfig, run_simulation
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

K = 4
D = 6  # embedding size
CLASSES = 10
SECRET = b"methods-test"
ALL = tuple(range(K))
MODEL = ModelConfig(representation="mlp", hidden=(12,), embed_dim=D)


# dlvm's networks and stage 2, kept as small as the others' models
DLVM = DlvmConfig(latent_dim=4, z_dim=2, hidden=(8,), stage2_epochs=1, predict_samples=4)


def config(method: str, seed: int = 0, epochs: int = 1, **kw: object) -> TrainConfig:
    return TrainConfig(
        method=method,
        seed=seed,
        epochs=epochs,
        batch_size=64,
        lr=1e-2,
        model=MODEL,
        dlvm=DLVM,
        **kw,
    )


def _prepare(root: Path, p_miss: float, label_blocks: list[int] | None = None) -> list[PartyData]:
    paths = prepare_parties(
        load_digits_dataset(),
        root,
        num_blocks=K,
        p_miss_train=[p_miss] * K,
        p_miss_test=[p_miss] * K,
        test_fraction=0.2,
        seed=0,
        label_blocks=label_blocks,
    )
    return [load_party_dir(p) for p in paths]


@pytest.fixture(scope="module")
def missing(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    """Digits where each party misses 30% of the samples: every observed pattern occurs."""
    return _prepare(tmp_path_factory.mktemp("miss"), 0.3)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    return _prepare(tmp_path_factory.mktemp("full"), 0.0)


@pytest.fixture(scope="module")
def two_label_parties(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    return _prepare(tmp_path_factory.mktemp("labels01"), 0.3, label_blocks=[0, 1])


def parties_of(data: list[PartyData], train: TrainConfig) -> dict[int, Party]:
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}


def federation(
    data: list[PartyData], train: TrainConfig, records: list[RoundRecord] | None = None
) -> tuple[Federation, dict[int, Party]]:
    parties = parties_of(data, train)
    on_round = records.append if records is not None else None
    fed = Federation(InProcessTransport(parties), train, progress=False, on_round=on_round)
    fed.align()
    return fed, parties


def embeddings(batch: int = 5, seed: int = 0, blocks=ALL, width: int = D) -> dict[int, np.ndarray]:
    gen = np.random.default_rng(seed)
    return {b: gen.standard_normal((batch, width)).astype(np.float32) for b in blocks}


def predict(party: Party, emb: dict[int, np.ndarray], blocks=ALL) -> np.ndarray:
    return party.predict(PredictCall(0, emb, tuple(blocks)))


# ------------------------------------------------------------------------ standard VFL


def test_given_svfl_when_a_block_is_missing_then_it_cannot_predict_and_only_full_sets_can() -> None:
    assert method_spec("svfl").predictors((0, 1, 2), K, ALL) is None
    assert method_spec("svfl").predictors((1, 2, 3), K, ALL) is None
    assert method_spec("svfl").predictors(ALL, K, ALL) == [0]


def test_given_svfl_when_trained_then_only_fully_observed_batches_train(
    missing: list[PartyData],
) -> None:
    records: list[RoundRecord] = []
    fed, parties = federation(missing, config("svfl"), records)
    fed.train()
    full_rounds = [r for r in records if r.pattern == ALL]
    partial = [r for r in records if r.pattern != ALL]
    assert full_rounds and partial
    assert all(r.present == () and r.losses == {} and r.updated == () for r in partial)
    assert all(r.present == ALL and set(r.losses) == {0} for r in full_rounds)
    # an incomplete batch changes no weight of any party
    batch = next(b for b in fed.plan(1) if b.pattern != ALL)
    before = {b: p.parameters_vector() for b, p in parties.items()}
    fed.run_round(fed.round_id, 1, batch)
    for b, p in parties.items():
        np.testing.assert_array_equal(p.parameters_vector(), before[b])


def _svfl_guesses(data: list[PartyData], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(classes guessed for incomplete test samples, their true... key indices)."""
    fed, _ = federation(data, config("svfl", seed=seed, epochs=0))
    guesses, index = [], []
    for pred in fed.predict_batches("test"):
        if pred.present != ALL:
            assert pred.party_probs == {}, "no head may be asked for an incomplete set"
            guesses.append(pred.predicted)
            index.append(pred.index)
    return np.concatenate(guesses), np.concatenate(index)


def test_given_svfl_when_a_test_block_is_missing_then_a_seeded_random_class_is_counted(
    missing: list[PartyData],
) -> None:
    guesses, index = _svfl_guesses(missing, seed=0)
    assert len(guesses) > 150
    counts = np.bincount(guesses, minlength=CLASSES)
    # random, not constant: every class drawn, none far from uniform (n/10 each)
    assert (counts > 0).all(), counts
    assert counts.max() < 3 * len(guesses) / CLASSES, counts
    again, again_index = _svfl_guesses(missing, seed=0)
    np.testing.assert_array_equal(again_index, index)
    np.testing.assert_array_equal(again, guesses)  # seeded: the same seed draws the same
    other, _ = _svfl_guesses(missing, seed=1)
    assert not np.array_equal(other, guesses)


def test_given_svfl_when_evaluated_then_random_guesses_are_scored_not_dropped(
    missing: list[PartyData],
) -> None:
    fed, _ = federation(missing, config("svfl", epochs=0))
    report = fed.evaluate("test")
    assert report.unscored == 0
    partial = [p for p in report.by_pattern if p != ALL]
    assert partial and all(report.by_pattern[p].samples > 0 for p in partial)


# ------------------------------------------------------------------------ ensemble vote


def _one_hot_probs(classes: list[int], rows: int, confidence: float = 0.6) -> np.ndarray:
    """(rows, C) probabilities whose argmax is classes[row % len(classes)]."""
    p = np.full((rows, CLASSES), (1 - confidence) / (CLASSES - 1), dtype=np.float32)
    p[np.arange(rows), [classes[i % len(classes)] for i in range(rows)]] = confidence
    return p


def test_given_a_majority_when_voting_then_it_wins_whatever_the_confidences() -> None:
    rows = 200
    probs = {
        0: _one_hot_probs([7], rows, confidence=0.99),  # one very sure party
        1: _one_hot_probs([2], rows, confidence=0.3),
        2: _one_hot_probs([2], rows, confidence=0.3),
    }
    for seed in range(5):
        out = majority_vote(probs, np.random.default_rng(seed))
        assert (out.predicted == 2).all()
        np.testing.assert_allclose(out.federation[:, 2], 2 / 3)
        np.testing.assert_allclose(out.federation[:, 7], 1 / 3)
        assert out.scored == {"ensemble": out.predicted}


def test_given_a_tie_when_voting_then_it_is_broken_at_random_among_the_tied_classes() -> None:
    rows = 4000
    probs = {
        0: _one_hot_probs([1], rows),
        1: _one_hot_probs([3], rows),
        2: _one_hot_probs([1], rows),
        3: _one_hot_probs([3], rows),
    }
    out = majority_vote(probs, np.random.default_rng(0))
    assert set(np.unique(out.predicted)) == {1, 3}
    share = float((out.predicted == 1).mean())
    assert 0.45 < share < 0.55, share  # fair coin over 4000 ties
    same = majority_vote(probs, np.random.default_rng(0))
    np.testing.assert_array_equal(same.predicted, out.predicted)  # deterministic per generator
    other = majority_vote(probs, np.random.default_rng(1))
    assert not np.array_equal(other.predicted, out.predicted)


def test_given_ensemble_when_combined_then_only_the_vote_is_scored() -> None:
    probs = {0: _one_hot_probs([4], 10), 1: _one_hot_probs([4], 10), 3: _one_hot_probs([5], 10)}
    out = combine(method_spec("ensemble").combination, (0, 1, 3), probs, np.random.default_rng(0))
    assert out is not None and list(out.scored) == ["ensemble"]
    assert (out.predicted == 4).all()
    laser = combine(method_spec("laser").combination, (0, 1, 3), probs, np.random.default_rng(0))
    assert laser is not None and sorted(laser.scored) == ["0", "1", "3"]  # each head scored
    assert (
        combine(method_spec("ensemble").combination, (0, 1), {}, np.random.default_rng(0)) is None
    )


def test_given_ensemble_when_evaluated_then_observing_parties_vote(
    missing: list[PartyData],
) -> None:
    fed, _ = federation(missing, config("ensemble"))
    fed.train()
    for pred in fed.predict_batches("test"):
        assert sorted(pred.party_probs) == list(pred.present)
        assert list(pred.scored) == ["ensemble"]


# ------------------------------------------------------------------------ PlugVFL


def test_given_plug_when_blocks_are_missing_then_the_head_sees_zeros_for_them(
    full: list[PartyData],
) -> None:
    active = parties_of(full, config("plug"))[0]
    emb = embeddings(blocks=(0, 2))
    got = predict(active, emb, blocks=(0, 2))
    zeros = np.zeros_like(emb[0])
    head_input = np.concatenate([emb[0], zeros, emb[2], zeros], axis=1)  # (B, K * d)
    head = active.models.head(SHARED)
    head.eval()
    with torch.no_grad():
        want = torch.softmax(head(torch.from_numpy(head_input)), dim=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # the same prediction as if the missing blocks had sent zero embeddings
    with_zeros = predict(active, {**emb, 1: zeros, 3: zeros})
    np.testing.assert_allclose(got, with_zeros, rtol=1e-6, atol=1e-7)


def test_given_plug_when_training_then_observed_non_active_blocks_are_dropped_at_random() -> None:
    kept = {b: 0 for b in ALL}
    draws = 2000
    for r in range(draws):
        tasks = method_spec("plug").fuse_tasks(0, ALL, K, ALL, rng(0, Stream.TASKS, r, 0))
        assert len(tasks) == 1 and tasks[0].head == SHARED
        for b in tasks[0].subset:
            kept[b] += 1
    assert kept[0] == draws  # the active party's own block is never dropped
    for b in (1, 2, 3):
        assert 0.45 < kept[b] / draws < 0.55, kept  # PLUG_DROPOUT = 0.5
    # only the active party trains a head
    assert method_spec("plug").fuse_tasks(1, ALL, K, ALL, rng(0, Stream.TASKS, 0, 1)) == []
    assert method_spec("plug").fuse_parties(ALL, ALL) == [0]


def test_given_plug_when_a_block_is_dropped_in_training_then_its_gradient_is_zero(
    full: list[PartyData],
) -> None:
    train = config("plug")
    parties = parties_of(full, train)
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    al = fed.alignments["train"]
    index = np.arange(16)
    for round_id in range(20):  # find rounds that drop some blocks and keep others
        subset = method_spec("plug").fuse_tasks(0, ALL, K, ALL, rng(0, Stream.TASKS, round_id, 0))
        kept = set(subset[0].subset)
        if 1 < len(kept) < K:
            break
    else:
        pytest.fail("no round dropped part of the blocks")
    digest = al.digest(index)
    emb = {
        b: p.embed(EmbedCall(round_id, "train", al.rows_of(b, index), digest, True, ALL))
        for b, p in parties.items()
    }
    result = parties[0].fuse(FuseCall(round_id, 0, {b: emb[b] for b in (1, 2, 3)}, ALL, ALL))
    for b in (1, 2, 3):
        nonzero = bool(np.abs(result.grads[b]).sum() > 0)
        assert nonzero == (b in kept), f"block {b}: kept {b in kept}, gradient nonzero {nonzero}"


def test_given_plug_when_predicting_then_nothing_is_dropped_and_it_is_deterministic(
    full: list[PartyData],
) -> None:
    active = parties_of(full, config("plug"))[0]
    emb = embeddings()
    first = predict(active, emb)
    np.testing.assert_array_equal(predict(active, emb), first)
    for b in (1, 2, 3):  # every observed block counts at inference
        changed = {**emb, b: emb[b] + 1.0}
        assert not np.allclose(predict(active, changed), first)
    assert method_spec("plug").predict_subset(0, ALL) == (SHARED, ALL)
    assert method_spec("plug").predictors((1, 2, 3), K, ALL) == []  # no active party, no predictor


# ------------------------------------------------------------------------ combinatorial


def _nonempty_subsets(blocks=ALL) -> set[tuple[int, ...]]:
    return {s for n in range(1, len(blocks) + 1) for s in combinations(blocks, n)}


def test_given_combinatorial_when_trained_on_all_patterns_then_one_head_per_subset(
    missing: list[PartyData],
) -> None:
    fed, parties = federation(missing, config("combinatorial"))
    fed.train()
    heads = {(b, key) for b, p in parties.items() for key in p.models.heads}
    assert len(heads) == 2**K - 1
    assert {key for _, key in heads} == _nonempty_subsets()
    for b, key in heads:
        assert b == min(key), f"subset {key} held by {b}, not its lowest label block"
    for b, p in parties.items():  # a representation model per subset containing the party
        assert set(p.models.reps) - {SHARED} == {s for s in _nonempty_subsets() if b in s}


def test_given_two_label_parties_when_combinatorial_then_subsets_without_labels_have_no_head(
    two_label_parties: list[PartyData],
) -> None:
    fed, parties = federation(two_label_parties, config("combinatorial"))
    fed.train()
    keys = [key for p in parties.values() for key in p.models.heads]
    assert len(keys) == len(set(keys)) == 2**K - 1 - 3  # {2}, {3}, {2, 3} hold no labels
    assert set(keys) == {s for s in _nonempty_subsets() if {0, 1} & set(s)}


def _perturb(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p))


def test_given_combinatorial_when_predicting_then_the_exact_observed_subset_is_used(
    missing: list[PartyData],
) -> None:
    fed, parties = federation(missing, config("combinatorial"))
    fed.train()
    present = (1, 3)
    assert method_spec("combinatorial").predictors(present, K, ALL) == [1]
    assert method_spec("combinatorial").predict_subset(1, present) == (present, present)
    owner = parties[1]
    width = len(method_spec("combinatorial").slot_keys(1, present)) * D  # slots of {1}, {1,3}
    emb = embeddings(blocks=present, width=width)
    first = predict(owner, emb, present)
    for key in owner.models.heads:  # any other head may change: the prediction does not
        if key != present:
            _perturb(owner.models.heads[key])
    np.testing.assert_array_equal(predict(owner, emb, present), first)
    _perturb(owner.models.heads[present])
    assert not np.allclose(predict(owner, emb, present), first)
    for pred in fed.predict_batches("test"):  # each batch scored by its own subset's predictor
        assert list(pred.scored) == [f"S{','.join(map(str, pred.present))}"]


# ------------------------------------------------------------------------ local


@pytest.mark.parametrize("method", ["local", "ensemble"])
def test_given_local_predictors_when_other_embeddings_change_then_predictions_do_not(
    method: str, missing: list[PartyData]
) -> None:
    fed, parties = federation(missing, config(method))
    fed.train()
    party = parties[2]
    emb = embeddings()
    first = predict(party, emb)
    for b in (0, 1, 3):
        noisy = {**emb, b: emb[b] * 10.0 + 3.0}
        np.testing.assert_array_equal(predict(party, noisy), first)
    np.testing.assert_array_equal(predict(party, {2: emb[2]}, blocks=(2,)), first)
    assert not np.allclose(predict(party, {**emb, 2: emb[2] + 1.0}), first)
    assert not method_spec(method).shares_embeddings  # the engine does not even send them


# ------------------------------------------------------------------------ determinism


# DVFL's label owner trains 60 epochs after the parties' by default (the paper's); two run its
# epoch loop (seeded by epoch) twice, as the other methods' checks run theirs once, and save ~25 s.
# tests/test_dvfl.py checks the same determinism with 3 owner epochs.
SHORT_OWNER = DvflConfig(owner_epochs=2)


def _simulate(method: str, seed: int, data_dirs: tuple[Path, ...]) -> dict:
    train = config(method, seed, dvfl=SHORT_OWNER)
    sim = run_simulation(
        SimulationConfig(party_dirs=data_dirs, secret=SECRET.decode(), train=train)
    )
    params = {b: p.parameters_vector() for b, p in sim.parties.items()}
    losses = [e.mean_loss for e in sim.epochs]
    return {"params": params, "losses": losses, "report": sim.reports[None].to_json()}


@pytest.fixture(scope="module")
def missing_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    root = tmp_path_factory.mktemp("dirs")
    _prepare(root, 0.3)
    return tuple(root / f"party{k}" for k in range(K))


@pytest.mark.parametrize("method", METHODS)
def test_given_the_same_seed_twice_when_simulated_then_results_are_identical(
    method: str, missing_dirs: tuple[Path, ...]
) -> None:
    first = _simulate(method, 0, missing_dirs)
    second = _simulate(method, 0, missing_dirs)
    for b in first["params"]:
        np.testing.assert_array_equal(second["params"][b], first["params"][b])
    assert second["losses"] == first["losses"]
    assert json.dumps(second["report"]) == json.dumps(first["report"])
    other = _simulate(method, 1, missing_dirs)
    assert any(not np.array_equal(other["params"][b], first["params"][b]) for b in first["params"])


def test_given_no_label_party_in_a_batch_when_combinatorial_then_the_batch_is_not_trained() -> None:
    # Every head of a subset sits at its lowest label block: without one, nothing can learn, so
    # the round is not run (no Embed and Backward calls for nothing).
    assert not method_spec("combinatorial").trainable((2, 3), K, (0, 1))
    assert method_spec("combinatorial").trainable((1, 3), K, (0, 1))
