"""PSI alignment (vfl_core.training.psi): the math it relies on, and that it aligns like the keyed
hashes.

The commutativity of X25519 on arbitrary u-coordinates (clamping included) is checked before the
protocol relies on it; then the in-process federation aligned by PSI must find exactly the observed
patterns the HMAC alignment finds, on digits and on Credit (a slice, to keep the test small).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import DataError, ProtocolError
from vfl_core.protocol import EmbedCall, PsiCall
from vfl_core.training import psi
from vfl_core.training.alignment import Alignment
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SECRET = b"psi-test-secret"
CREDIT_CSV = Path("/work/shared/data/UCI_Credit_Card.csv")
CREDIT_ROWS = 3000  # PSI costs ~0.1 ms per point and party on this machine; a slice suffices


def _key(seed: bytes) -> psi.PsiKey:
    return psi.PsiKey(X25519PrivateKey.from_private_bytes(hashlib.sha256(seed).digest()))


# ------------------------------------------------------------------------------ the math


@settings(max_examples=40, deadline=None)
@given(
    a=st.binary(min_size=1, max_size=8),
    b=st.binary(min_size=1, max_size=8),
    u=st.binary(min_size=32, max_size=32),
)
def test_given_two_scalars_when_applied_in_either_order_then_x25519_commutes(
    a: bytes, b: bytes, u: bytes
) -> None:
    ka, kb = _key(b"a" + a), _key(b"b" + b)
    try:
        ab = ka.apply(kb.apply([u]))
        ba = kb.apply(ka.apply([u]))
    except ProtocolError:  # a random u of small order (probability ~2^-250): nothing to check
        return
    assert ab == ba


def test_given_raw_scalar_bytes_when_clamped_by_the_library_then_order_still_does_not_matter() -> (
    None
):
    """The library clamps (clears bits 0-2 and 255, sets 254): scalars that differ only in
    clamped bits are the same scalar, and four keys commute in any order."""
    raw = bytearray(hashlib.sha256(b"k").digest())
    same = bytearray(raw)
    same[0] ^= 0x07  # bits 0-2: cleared by clamping
    same[31] ^= 0x80  # bit 255: cleared by clamping
    u = [psi.id_point(f"id-{i}") for i in range(20)]
    k1 = psi.PsiKey(X25519PrivateKey.from_private_bytes(bytes(raw)))
    k2 = psi.PsiKey(X25519PrivateKey.from_private_bytes(bytes(same)))
    assert k1.apply(u) == k2.apply(u)
    keys = [_key(bytes([i])) for i in range(4)]
    orders = [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)]
    results = []
    for order in orders:
        points = u
        for i in order:
            points = keys[i].apply(points)
        results.append(points)
    assert results[0] == results[1] == results[2]
    assert len(set(results[0])) == len(u)


def test_given_id_points_when_mapped_then_deterministic_distinct_and_bit_255_clear() -> None:
    points = [psi.id_point(f"s{i}") for i in range(1000)]
    assert points == [psi.id_point(f"s{i}") for i in range(1000)]
    assert len(set(points)) == 1000 and all(p[31] < 0x80 for p in points)


def test_given_small_order_point_when_applied_then_refused() -> None:
    with pytest.raises(ProtocolError, match="small order"):
        _key(b"x").apply([bytes(32)])
    with pytest.raises(ProtocolError, match="33 bytes"):
        _key(b"x").apply([bytes(33)])


def _with(key: psi.PsiKey, processes: int) -> psi.PsiKey:
    return psi.PsiKey(key._key, processes=processes)


def test_given_a_large_list_when_multiplied_by_worker_processes_then_as_in_one_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks in a pool of spawned workers give the same points, in order, as one process;
    a bad point in a worker's chunk is named by its index in the whole list."""
    monkeypatch.setattr(psi, "PARALLEL_MIN_POINTS", 10)
    key = _key(b"parallel")
    ids: list[object] = [*range(40), *(f"customer-{i}" for i in range(37))]
    points = [psi.id_point(i) for i in ids]
    assert _with(key, 2).apply(points) == _with(key, 1).apply(points)
    assert _with(key, 2).blind(ids) == _with(key, 1).blind(ids) == _with(key, 1).apply(points)
    assert _with(key, 2).blind([]) == []
    bad = [*points[:57], bytes(32), *points[57:]]
    with pytest.raises(ProtocolError, match="point 57 is of small order"):
        _with(key, 2).apply(bad)


def test_given_lists_after_every_party_when_finalised_then_one_product_per_distinct_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    applied: list[int] = []
    apply = psi.PsiKey.apply

    def counting(self: psi.PsiKey, points: list[bytes], what: str = "") -> list[bytes]:
        applied.append(len(points))
        return apply(self, points, what)

    monkeypatch.setattr(psi.PsiKey, "apply", counting)
    shared = [psi.id_point(f"both-{i}") for i in range(30)]
    lists = {0: [*shared, psi.id_point("a")], 1: [psi.id_point("b"), *shared[::-1]]}
    final = psi._final_values(lists, [0, 1])
    assert applied == [32]  # not 62: the 30 shared values once each
    assert final[0][:30] == final[1][1:][::-1]
    assert len(set(final[0]) | set(final[1])) == 32


def test_given_packed_points_when_unpacked_then_same_or_refused() -> None:
    points = [psi.id_point(i) for i in range(5)]
    assert psi.unpack(psi.pack(points), count=5) == points
    with pytest.raises(ProtocolError, match="whole number"):
        psi.unpack(psi.pack(points)[:-1])
    with pytest.raises(ProtocolError, match="expected 4"):
        psi.unpack(psi.pack(points), count=4)


def test_given_party_when_asked_to_apply_more_lists_than_the_federation_has_then_refused() -> None:
    state = psi.PartyPsi(max_lists=3)
    points = [psi.id_point(i) for i in range(3)]
    for _ in range(3):
        state.apply("s1", "train", points)
    with pytest.raises(ProtocolError, match="already applied to 3 lists"):
        state.apply("s1", "train", points)
    state.apply("s1", "test", points)  # another split has its own quota
    with pytest.raises(ProtocolError, match="session"):
        state.apply("", "train", points)


# ------------------------------------------------------------------------------ alignment


def _parties(paths: list[Path], train: TrainConfig) -> dict[int, Party]:
    data = [load_party_dir(p) for p in paths]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}


def _by_rows(al: Alignment) -> dict[tuple[int, ...], set[tuple[int, ...]]]:
    """pattern -> the set of row tuples (one row per block, -1 if absent): key-independent."""
    blocks = sorted(al.rows)
    return {
        pattern: {tuple(int(al.rows[b][i]) for b in blocks) for i in index}
        for pattern, index in al.patterns().items()
    }


def _aligned(parties: dict[int, Party], train: TrainConfig, alignment: str) -> Federation:
    fed = Federation(InProcessTransport(parties), train, progress=False, alignment=alignment)
    fed.align()
    return fed


def _assert_same_patterns(paths: list[Path]) -> Federation:
    train = TrainConfig(epochs=1)
    plain = _aligned(_parties(paths, train), train, "hmac")
    private = _aligned(_parties(paths, train), train, "psi")
    assert plain.alignments.keys() == private.alignments.keys() == {"train", "test"}
    for split in plain.alignments:
        a, b = plain.alignments[split], private.alignments[split]
        assert len(a) == len(b)
        assert _by_rows(a) == _by_rows(b)
        assert set(a.keys).isdisjoint(b.keys)  # PSI values are not the keyed hashes
    return private


def test_given_digits_when_aligned_by_psi_then_same_patterns_as_keyed_hashes(
    tmp_path: Path,
) -> None:
    paths = prepare_parties(
        load_dataset("digits"), tmp_path, 4, [0.3] * 4, [0.3] * 4, test_fraction=0.2, seed=1
    )
    fed = _assert_same_patterns(paths)
    assert len(fed.alignments["train"].patterns()) > 4


def test_given_credit_when_aligned_by_psi_then_same_patterns_as_keyed_hashes(
    tmp_path: Path,
) -> None:
    try:
        credit = load_dataset("credit", CREDIT_CSV)
    except DataError as err:
        pytest.skip(f"Credit data not available: {err}")
    n = CREDIT_ROWS
    credit = dataclasses.replace(credit, x=credit.x[:n], y=credit.y[:n], ids=credit.ids[:n])
    paths = prepare_parties(credit, tmp_path, 4, [0.2] * 4, [0.2] * 4, test_fraction=0.2, seed=0)
    _assert_same_patterns(paths)


def test_given_psi_alignment_when_trained_then_digests_check_and_plan_is_key_independent(
    tmp_path: Path,
) -> None:
    """Parties check batch digests over the PSI values; the order of the samples (so the plan)
    does not depend on the random PSI secrets."""
    paths = prepare_parties(
        load_dataset("digits"), tmp_path, 4, [0.2] * 4, [0.2] * 4, test_fraction=0.2, seed=2
    )
    train = TrainConfig(epochs=1, batch_size=256)
    first = _aligned(_parties(paths, train), train, "psi")
    second = _aligned(_parties(paths, train), train, "psi")
    rows = first.alignments["train"].rows
    assert all(np.array_equal(rows[b], second.alignments["train"].rows[b]) for b in rows)
    assert first.alignments["train"].keys != second.alignments["train"].keys
    plan = [(b.pattern, b.index.tolist()) for b in first.plan(0)]
    assert plan == [(b.pattern, b.index.tolist()) for b in second.plan(0)]
    record = first.run_round(0, 0, first.plan(0)[0])
    assert record.present == record.pattern and record.updated == record.pattern


def test_given_wrong_final_keys_when_set_then_refused_and_digest_mismatch_without_them(
    tmp_path: Path,
) -> None:
    paths = prepare_parties(
        load_dataset("digits"), tmp_path, 2, [0.0] * 2, [0.0] * 2, test_fraction=0.2, seed=0
    )
    train = TrainConfig(epochs=1)
    party = _parties(paths, train)[0]
    n = len(party.data.splits["train"])
    with pytest.raises(ProtocolError, match="keys for"):
        party.set_alignment_keys("train", [psi.id_point(i) for i in range(n - 1)])
    with pytest.raises(ProtocolError, match="duplicated"):
        party.set_alignment_keys("train", [psi.id_point(0)] * n)
    transport = InProcessTransport({0: party})
    assert transport.psi_keys({0: PsiCall("train", "s", [b"x"] * n)}) == set()


class _Restarts(InProcessTransport):
    """Reports the blocks in `back` once as rejoined (a party that registered again)."""

    back: frozenset[int] = frozenset()

    def rejoined(self) -> set[int]:
        back, self.back = set(self.back), frozenset()
        return back


def test_given_psi_party_restarted_when_it_rejoins_then_engine_sends_its_values_again(
    tmp_path: Path,
) -> None:
    paths = prepare_parties(
        load_dataset("digits"), tmp_path, 2, [0.0] * 2, [0.0] * 2, test_fraction=0.2, seed=0
    )
    train = TrainConfig(epochs=1)
    parties = _parties(paths, train)
    transport = _Restarts(parties)
    fed = Federation(transport, train, progress=False, alignment="psi")
    fed.align()
    # A new process of party 1: same data, none of the PSI values of its rows.
    transport.parties[1] = _parties(paths[1:], train)[1]
    batch = fed.plan(0)[0]
    al = fed.alignments["train"]
    call = EmbedCall(0, "train", al.rows_of(1, batch.index), al.digest(batch.index), False, (1,))
    with pytest.raises(ProtocolError, match="digest mismatch"):  # what it would say unhelped
        transport.parties[1].embed(call)
    transport.back = frozenset({1})
    record = fed.run_round(0, 0, batch)
    assert record.present == record.pattern == (0, 1) and record.updated == (0, 1)
