"""Alignment from keyed ID hashes and the batch plan (DESIGN.md invariant 3): every batch is
single-pattern, the plan is a pure function of (seed, epoch, alignment), every observed sample is
used once per epoch, and coordinator and parties agree on each batch's digest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from harness import digits_parties
from hypothesis import given, settings
from hypothesis import strategies as st

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.errors import ProtocolError
from vfl_core.protocol import PsiCall
from vfl_core.training import engine
from vfl_core.training.alignment import (
    UNMATCHED,
    Alignment,
    Batch,
    UnmatchedIds,
    batch_digest,
    check_shared,
    epoch_plan,
    eval_plan,
    hash_ids,
    key_list_fault,
)
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SECRET = b"test-secret"
SMALL = ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))


class Federation:
    """Sample IDs held by each block, in each block's own (shuffled) row order."""

    def __init__(self, held: list[frozenset[int]], num_blocks: int, seed: int = 0) -> None:
        gen = np.random.default_rng(seed)
        self.held = held
        self.ids: dict[int, list[str]] = {}
        for b in range(num_blocks):
            ids = [f"id-{i}" for i, blocks in enumerate(held) if b in blocks]
            self.ids[b] = [ids[j] for j in gen.permutation(len(ids))]
        self.hashes = {b: hash_ids(ids, SECRET) for b, ids in self.ids.items()}
        self.alignment = Alignment.build(self.hashes)

    def pattern_of_key(self, key: int) -> tuple[int, ...]:
        return tuple(b for b, rows in sorted(self.alignment.rows.items()) if rows[key] >= 0)


@st.composite
def federations(draw: st.DrawFn) -> Federation:
    num_blocks = draw(st.integers(1, 4))
    n = draw(st.integers(1, 80))
    nonempty = st.sets(st.integers(0, num_blocks - 1), min_size=1).map(frozenset)
    held = draw(st.lists(nonempty, min_size=n, max_size=n))
    return Federation(held, num_blocks, seed=draw(st.integers(0, 2**16)))


def random_federation(n: int, num_blocks: int, p_miss: float, seed: int) -> Federation:
    gen = np.random.default_rng(seed)
    held = []
    while len(held) < n:
        blocks = frozenset(np.flatnonzero(gen.random(num_blocks) >= p_miss).tolist())
        if blocks:
            held.append(blocks)
    return Federation(held, num_blocks, seed)


def plan_key(plan: list[Batch]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(b.pattern, tuple(b.index.tolist())) for b in plan]


def assert_single_pattern(fed: Federation, plan: list[Batch]) -> None:
    for batch in plan:
        assert len(batch.index) > 0
        for key in batch.index:
            assert fed.pattern_of_key(int(key)) == batch.pattern


# ---------------------------------------------------------------- the plan


@settings(max_examples=60, deadline=None)
@given(fed=federations(), seed=st.integers(0, 2**32), batch_size=st.integers(1, 17))
def test_given_random_alignment_when_planning_then_batches_are_single_pattern_and_exhaustive(
    fed: Federation, seed: int, batch_size: int
) -> None:
    al = fed.alignment
    assert len(al) == len(fed.held)  # every sample is held by some block
    for epoch in (0, 1):
        plan = epoch_plan(al, seed, epoch, batch_size)
        assert_single_pattern(fed, plan)
        assert all(len(b.index) <= batch_size for b in plan)
        used = np.sort(np.concatenate([b.index for b in plan]))
        np.testing.assert_array_equal(used, np.arange(len(al)))  # each sample exactly once
        assert plan_key(plan) == plan_key(epoch_plan(al, seed, epoch, batch_size))


@settings(max_examples=60, deadline=None)
@given(fed=federations(), seed=st.integers(0, 2**32), batch_size=st.integers(1, 17))
def test_given_random_alignment_when_digesting_then_coordinator_and_parties_agree(
    fed: Federation, seed: int, batch_size: int
) -> None:
    al = fed.alignment
    for batch in epoch_plan(al, seed, 0, batch_size):
        digest = al.digest(batch.index)
        for block in batch.pattern:
            rows = al.rows_of(block, batch.index)
            # The party looks its own rows up in its own ID list.
            assert [fed.ids[block][r] for r in rows] == [
                fed.ids[batch.pattern[0]][r] for r in al.rows_of(batch.pattern[0], batch.index)
            ]
            own = hash_ids([fed.ids[block][r] for r in rows], SECRET)
            assert batch_digest(own) == digest
        absent = [b for b in al.rows if b not in batch.pattern]
        for block in absent:
            with pytest.raises(ValueError, match="does not hold"):
                al.rows_of(block, batch.index)


def test_given_other_row_order_when_digesting_then_digest_differs() -> None:
    fed = random_federation(50, 3, 0.0, seed=1)
    index = np.arange(10)
    assert fed.alignment.digest(index) != fed.alignment.digest(index[::-1])
    assert fed.alignment.digest(index) != fed.alignment.digest(index[:9])


def test_given_same_seed_when_planning_then_same_plan_and_other_seed_or_epoch_differ() -> None:
    fed = random_federation(300, 4, 0.3, seed=2)
    al = fed.alignment
    plan = plan_key(epoch_plan(al, 7, 0, 16))
    assert plan == plan_key(epoch_plan(al, 7, 0, 16))
    # A rebuilt alignment (same hashes, parties listed in another order) plans the same.
    rebuilt = Alignment.build(dict(reversed(list(fed.hashes.items()))))
    assert plan == plan_key(epoch_plan(rebuilt, 7, 0, 16))
    other_seed = plan_key(epoch_plan(al, 8, 0, 16))
    other_epoch = plan_key(epoch_plan(al, 7, 1, 16))
    assert other_seed != plan and other_epoch != plan
    # Another epoch reorders the same samples.
    assert sorted(i for _, idx in other_epoch for i in idx) == sorted(
        i for _, idx in plan for i in idx
    )
    assert [p for p, _ in other_epoch] != [p for p, _ in plan]


def test_given_alignment_when_built_then_rows_map_keys_to_each_blocks_rows() -> None:
    fed = random_federation(40, 3, 0.4, seed=3)
    al = fed.alignment
    # ordered by the rows (the lowest block's first), not by the keys
    order = [tuple(al.rows[b][i] for b in sorted(al.rows)) for i in range(len(al))]
    assert order == sorted(order)
    for block, rows in al.rows.items():
        assert rows.dtype == np.int64 and rows.shape == (len(al),)
        held = rows[rows >= 0]
        np.testing.assert_array_equal(np.sort(held), np.arange(len(fed.ids[block])))
        for key in np.flatnonzero(rows >= 0):
            assert fed.hashes[block][rows[key]] == al.keys[key]
    groups = al.patterns()
    assert sum(len(g) for g in groups.values()) == len(al)
    for pattern, keys in groups.items():
        assert all(fed.pattern_of_key(int(k)) == pattern for k in keys)


def test_given_duplicated_hashes_when_aligning_then_protocol_error() -> None:
    hashes = hash_ids(["a", "b", "c"], SECRET)
    with pytest.raises(ProtocolError, match="block 1 sent duplicated"):
        Alignment.build({0: hashes, 1: [hashes[0], hashes[1], hashes[0]]})


def test_given_blocks_sharing_no_sample_when_aligned_then_named_unshared() -> None:
    def unshared(*ids: list[str]) -> list[int]:
        return Alignment.build({b: hash_ids(i, SECRET) for b, i in enumerate(ids)}).unshared()

    assert unshared(["007", "008"], ["7", "8"]) == [0, 1]  # the same customers, written apart
    assert unshared(["a", "b"], ["b", "c"], ["x"]) == [2]
    assert unshared(["a", "b"], ["b"], []) == []  # block 2 holds nothing: nothing to share
    assert unshared(["a", "b"]) == []  # one block has no one to share with


def test_given_ids_when_hashing_then_keyed_and_deterministic() -> None:
    ids = ["a", "b", "7"]
    assert hash_ids(ids, SECRET) == hash_ids(ids, SECRET)
    assert hash_ids(ids, SECRET) != hash_ids(ids, b"other")
    assert len(set(hash_ids(ids, SECRET))) == 3
    assert all(len(h) == 32 for h in hash_ids(ids, SECRET))
    assert hash_ids([7], SECRET) == hash_ids(["7"], SECRET)


# ---------------------------------------------------------------- class-balanced resampling


def test_given_class_weights_when_resampling_then_len_samples_single_pattern_and_balanced() -> None:
    fed = random_federation(2000, 4, 0.3, seed=4)
    al = fed.alignment
    gen = np.random.default_rng(0)
    labels = (gen.random(len(al)) < 0.2).astype(np.int64)  # ~20% positive, by key
    counts = np.bincount(labels, minlength=2)
    weights = (1.0 / counts)[labels]
    plan = epoch_plan(al, 11, 0, 64, weights)
    assert_single_pattern(fed, plan)
    drawn = np.concatenate([b.index for b in plan])
    assert len(drawn) == len(al)
    assert abs(labels[drawn].mean() - 0.5) < 0.05  # vs 0.2 without resampling
    assert len(np.unique(drawn)) < len(al)  # drawn with replacement
    assert plan_key(plan) == plan_key(epoch_plan(al, 11, 0, 64, weights))
    assert plan_key(plan) != plan_key(epoch_plan(al, 11, 1, 64, weights))


@settings(max_examples=30, deadline=None)
@given(fed=federations(), seed=st.integers(0, 2**32), data=st.data())
def test_given_random_weights_when_resampling_then_every_batch_is_single_pattern(
    fed: Federation, seed: int, data: st.DataObject
) -> None:
    n = len(fed.alignment)
    weights = np.array(data.draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n)))
    plan = epoch_plan(fed.alignment, seed, 0, 8, weights)
    assert_single_pattern(fed, plan)
    assert sum(len(b.index) for b in plan) == n


def test_given_zero_weight_samples_when_resampling_then_they_are_never_drawn() -> None:
    fed = random_federation(200, 2, 0.2, seed=5)
    weights = np.ones(len(fed.alignment))
    weights[:100] = 0.0
    drawn = np.concatenate([b.index for b in epoch_plan(fed.alignment, 0, 0, 32, weights)])
    assert drawn.min() >= 100


# ---------------------------------------------------------------- evaluation plan


def test_given_alignment_when_eval_planning_then_unshuffled_single_pattern_cover() -> None:
    fed = random_federation(500, 4, 0.4, seed=6)
    al = fed.alignment
    plan = eval_plan(al, 64)
    assert_single_pattern(fed, plan)
    all_keys = np.concatenate([b.index for b in plan])
    np.testing.assert_array_equal(np.sort(all_keys), np.arange(len(al)))
    for batch in plan:
        assert np.all(np.diff(batch.index) > 0)  # the alignment's order within a pattern
    assert plan_key(plan) == plan_key(eval_plan(al, 64))
    subset = np.arange(0, len(al), 3)
    sub_plan = eval_plan(al, 64, subset)
    assert_single_pattern(fed, sub_plan)
    np.testing.assert_array_equal(np.sort(np.concatenate([b.index for b in sub_plan])), subset)
    sizes = Counter(len(b.index) for b in plan)
    assert max(sizes) <= 64


# ------------------------------------------------------------------ a party's bad key list


def test_key_list_fault_names_count_length_and_duplicates() -> None:
    keys = hash_ids(["a", "b", "c"], SECRET)
    assert key_list_fault(keys, 3) is None
    assert key_list_fault(keys, 4) == "3 keys for 4 rows"
    assert key_list_fault([*keys[:2], keys[2][:4]], 3) == "a key of 4 bytes, not 32"
    assert key_list_fault([keys[0], keys[1], keys[0]], 3) == "1 duplicated keys"


class _Hostile(InProcessTransport):
    """Block 1 sends a key list that breaks the alignment: `how` of its train keys."""

    def __init__(self, parties: dict[int, Party], how: str) -> None:
        super().__init__(parties)
        self.how = how

    def _spoil(self, split: str, keys: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
        if 1 in keys and split == "train":
            k = keys[1]
            if self.how == "duplicated":
                keys[1] = [k[0], k[0], *k[2:]]
            elif self.how == "extra":
                keys[1] = [*k, b"x" * 32]
            elif self.how == "small-order":  # PSI: 0, a point no ID maps to
                keys[1] = [bytes(32), *k[1:]]
            elif self.how == "short":
                keys[1] = [h[:8] for h in k]
        return keys

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self._spoil(split, super().id_hashes(split, blocks))

    def psi_blind(self, split: str, session: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self._spoil(split, super().psi_blind(split, session, blocks))

    def psi_apply(self, calls: dict[int, PsiCall]) -> dict[int, list[bytes]]:
        answers = super().psi_apply(calls)
        if self.how == "small-order-applied" and 1 in answers and calls[1].split == "train":
            answers[1] = [(1).to_bytes(32, "little"), *answers[1][1:]]  # on another's list
        return answers


@pytest.mark.parametrize(
    ("alignment", "how"),
    [
        ("hmac", "duplicated"),
        ("hmac", "extra"),
        ("hmac", "short"),
        ("psi", "duplicated"),
        ("psi", "small-order"),
        ("psi", "small-order-applied"),
    ],
)
def test_given_party_sending_a_bad_key_list_when_aligning_then_left_out_and_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, alignment: str, how: str
) -> None:
    """A duplicated key used to stop the run (ProtocolError out of Alignment.build) and a list
    of other length or key size was aligned as it came. A PSI point of small order in block 1's
    own list, or in a list it applied its secret to, made the next party refuse it and be left
    out (an honest one), then stopped the run when the coordinator applied its own secret."""
    train = TrainConfig(seed=0, epochs=1, batch_size=128, model=SMALL)
    transport = _Hostile(digits_parties(tmp_path, 3, train), how)
    fed = engine.Federation(transport, train, progress=False, alignment=alignment)
    with caplog.at_level("WARNING"):
        fed.align()
        fed.train()
    assert 1 not in fed.alignments["train"].rows and fed.unaligned == {1}
    assert 1 in fed.alignments["test"].rows  # its other split was sound
    said = (
        "psi train: block 1 sent a point of small order in "
        if how.startswith("small-order")
        else "aligned train without block 1 (party1): its sample keys are refused ("
    )
    assert said in caplog.text


class _HostileWeights(InProcessTransport):
    """Block 0, a label party, answers ClassWeights with `weights(its own)`."""

    def __init__(self, parties: dict[int, Party], spoil: Callable[[np.ndarray], np.ndarray]):
        super().__init__(parties)
        self.spoil = spoil

    def class_weights(self, block: int, split: str) -> np.ndarray | None:
        weights = super().class_weights(block, split)
        return self.spoil(weights) if block == 0 and weights is not None else weights


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        (lambda w: w[:10], "class weights of block 0 refused: 10 weights for its "),
        (lambda w: -w, "class weights of block 0 refused: weights that are not finite and "),
        (lambda w: w * np.nan, "class weights of block 0 refused: weights that are not finite "),
    ],
)
def test_given_label_party_sending_bad_class_weights_when_resampling_then_others_weigh(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    spoil: Callable[[np.ndarray], np.ndarray],
    said: str,
) -> None:
    """Too few weights stopped the run (IndexError); negative or NaN ones reached the sampler."""
    train = TrainConfig(seed=0, epochs=1, batch_size=128, model=SMALL, balance="resample")
    transport = _HostileWeights(digits_parties(tmp_path, 3, train), spoil)
    fed = engine.Federation(transport, train, progress=False)
    with caplog.at_level("WARNING"):
        fed.align()
        summaries = fed.train()
    assert said in caplog.text
    assert summaries[0].rounds > 0 and np.isfinite(fed._weights).all()


def test_given_a_block_sharing_no_sample_when_checked_then_refused_naming_it() -> None:
    shared = Alignment.build({b: hash_ids(i, SECRET) for b, i in enumerate([["a", "b"], ["b"]])})
    check_shared(shared, {0: "bank", 1: "shop"})  # partial overlap: nothing to refuse
    apart = Alignment.build(
        {b: hash_ids(i, SECRET) for b, i in enumerate([["a", "b"], ["b", "c"], ["007", "x"]])}
    )
    with pytest.raises(UnmatchedIds) as err:
        check_shared(apart, {0: "bank", 1: "shop", 2: "telco"})
    said = str(err.value)
    assert said.startswith(UNMATCHED)
    assert "block 2 (telco) shares none of its 2 train IDs with another party" in said
    assert "block 0" not in said and "leading zeros" in said
