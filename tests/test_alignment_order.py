"""The alignment's order, and so the batch plan and the validation split, comes from the parties'
rows, never from the key values (issue 48): the same tables and seed train alike whether the
samples were matched by PSI (values drawn afresh every run, the default over gRPC) or by keyed
ID hashes (`vfl simulate`), under any secret. Before, keyed hashes ordered the samples by hash,
PSI by rows, and a three-table federation trained 54 epochs in process and 34 over gRPC."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tabular_tables import bank_sources, write_tables

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import load_table_federation
from vfl_core.training.alignment import Alignment, epoch_plan, hash_ids
from vfl_core.training.early_stop import hold_out
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party


def _ids(held: list[frozenset[int]], blocks: int, seed: int) -> dict[int, list[str]]:
    """Each block's IDs, in a row order of its own."""
    gen = np.random.default_rng(seed)
    out = {}
    for b in range(blocks):
        ids = [f"id-{i}" for i, holders in enumerate(held) if b in holders]
        out[b] = [ids[j] for j in gen.permutation(len(ids))]
    return out


def _psi_like(ids: dict[int, list[str]]) -> dict[int, list[bytes]]:
    """What a PSI gives: one random 32-byte value per distinct ID, new every run."""
    value = {i: secrets.token_bytes(32) for i in sorted({i for b in ids.values() for i in b})}
    return {b: [value[i] for i in block_ids] for b, block_ids in ids.items()}


def _plan(al: Alignment, seed: int) -> list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]:
    """An epoch's batches as each holder's rows: what the parties are asked for."""
    return [
        (b.pattern, tuple(tuple(al.rows_of(k, b.index).tolist()) for k in b.pattern))
        for b in epoch_plan(al, seed, 0, 8)
    ]


@st.composite
def holdings(draw: st.DrawFn) -> tuple[list[frozenset[int]], int, int]:
    blocks = draw(st.integers(1, 4))
    n = draw(st.integers(2, 60))
    nonempty = st.sets(st.integers(0, blocks - 1), min_size=1).map(frozenset)
    return draw(st.lists(nonempty, min_size=n, max_size=n)), blocks, draw(st.integers(0, 999))


@settings(max_examples=60, deadline=None)
@given(holdings())
def test_given_the_same_rows_when_keyed_by_psi_or_any_secret_then_one_order_plan_and_split(
    case: tuple[list[frozenset[int]], int, int],
) -> None:
    held, blocks, seed = case
    ids = _ids(held, blocks, seed)
    built = [
        Alignment.build({b: hash_ids(i, b"one secret") for b, i in ids.items()}),
        Alignment.build({b: hash_ids(i, b"another secret") for b, i in ids.items()}),
        Alignment.build(_psi_like(ids)),
        Alignment.build(_psi_like(dict(reversed(list(ids.items()))))),  # parties listed backwards
    ]
    first = built[0]
    scorable = first.rows[0] >= 0
    for al in built[1:]:
        assert sorted(al.rows) == sorted(first.rows)
        for b in first.rows:
            np.testing.assert_array_equal(al.rows[b], first.rows[b])
        assert _plan(al, seed) == _plan(first, seed)
        if scorable.sum() >= 2:
            for got, want in zip(
                hold_out(al.rows[0] >= 0, seed, 0.5), hold_out(scorable, seed, 0.5), strict=True
            ):
                np.testing.assert_array_equal(got, want)


def test_given_rows_when_built_then_ordered_by_the_lowest_blocks_row_first() -> None:
    a, b, c, d = (bytes([k]) * 32 for k in range(4))
    # block 0 holds d then a; block 1 holds b, a, c
    al = Alignment.build({1: [b, a, c], 0: [d, a]})
    # samples block 0 lacks (row -1) first, by block 1's row; then block 0's rows in order
    assert al.keys == (b, c, d, a)
    np.testing.assert_array_equal(al.rows[0], [-1, -1, 0, 1])
    np.testing.assert_array_equal(al.rows[1], [0, 2, -1, 1])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_tables(tmp_path_factory.mktemp("order"), n=500, share=0.8)


def _trained(paths: dict[str, Path], alignment: str, secret: bytes) -> Federation:
    train = TrainConfig(epochs=2, early_stop_patience=1, validation_fraction=0.3, seed=3)
    data = load_table_federation(bank_sources(paths))
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=secret) for d in data}
    fed = Federation(InProcessTransport(parties), train, progress=False, alignment=alignment)
    fed.align()
    fed.train()
    return fed


def test_given_three_tables_when_aligned_by_psi_or_by_hashes_then_trained_bit_identically(
    tables: dict[str, Path],
) -> None:
    """The whole run in process: PSI against keyed hashes under another secret; the validation
    split, its record and every party's weights are the same, to the bit."""
    by_psi = _trained(tables, "psi", b"secret one")
    by_hash = _trained(tables, "hmac", b"secret two")
    assert by_psi.train_rows.validation is not None and len(by_psi.train_rows.validation)
    for split, al in by_psi.alignments.items():
        for b, rows in al.rows.items():
            np.testing.assert_array_equal(rows, by_hash.alignments[split].rows[b])
    np.testing.assert_array_equal(by_psi.train_rows.validation, by_hash.train_rows.validation)
    assert by_psi.early_stop is not None and by_hash.early_stop is not None
    assert by_psi.early_stop.to_json() == by_hash.early_stop.to_json()
    assert by_psi.evaluate("test").to_json() == by_hash.evaluate("test").to_json()
    for block, party in by_psi.transport.parties.items():  # type: ignore[attr-defined]
        other = by_hash.transport.parties[block]  # type: ignore[attr-defined]
        np.testing.assert_array_equal(party.parameters_vector(), other.parameters_vector())
