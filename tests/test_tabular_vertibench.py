"""The VertiBench grid's pieces (issue 45 item 4): the splits deal every column of a table to
exactly one of the K parties, none empty, the same for the same seed; a small Dirichlet alpha
gives one party most columns where a large one shares them; the correlation splits differ with
beta. The grid's skewed regressions are positive and skewed, so that the log target's rule takes
them, and the benchmark's own tables are unchanged (they are not in `vfl bench tabular`)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.tabular.tables import EXTRA_TABLES, K, tables
from vfl_core.data.learning_task import wants_log


def test_given_the_extra_tables_then_positive_skewed_regressions_outside_the_benchmark() -> None:
    assert not set(EXTRA_TABLES) & set(tables(None, True))
    every = tables(None, True, extra=True)
    for name in EXTRA_TABLES:
        table = every[name](0, True)
        assert table.task == "regression" and table.categorical
        assert table.label.min() >= 0 and wants_log(table.label)
        again = every[name](0, True)
        np.testing.assert_array_equal(again.label, table.label)  # the seed fixes it


def test_given_importance_splits_then_a_partition_and_alpha_sets_the_balance() -> None:
    pytest.importorskip("vertibench", reason="the VertiBench splits need the bench extra")
    from benchmarks.tabular.vertibench import split_blocks

    table = tables(None, True)["gen_categorical"](0, True)
    spread = {}
    for split in ("importance-0.1", "importance-100"):
        sizes = []
        for seed in range(6):
            blocks = split_blocks(table, split, seed)
            assert len(blocks) == K and all(blocks)
            flat = [c for b in blocks for c in b]
            assert sorted(flat) == sorted(table.columns)
            assert split_blocks(table, split, seed) == blocks
            sizes.append(max(len(b) for b in blocks))
        spread[split] = np.mean(sizes)
    assert spread["importance-0.1"] > spread["importance-100"]  # one party holds more


def test_given_correlation_splits_then_equal_shares_that_beta_moves() -> None:
    pytest.importorskip("vertibench", reason="the VertiBench splits need the bench extra")
    from benchmarks.tabular.vertibench import split_blocks

    table = tables(None, True)["gen_skewed"](0, True)
    low = split_blocks(table, "correlation-0", 0)
    high = split_blocks(table, "correlation-1", 0)
    for blocks in (low, high):
        assert sorted(len(b) for b in blocks) == [4, 4, 4]
        assert sorted(c for b in blocks for c in b) == sorted(table.columns)
    assert {frozenset(b) for b in low} != {frozenset(b) for b in high}


def test_given_a_four_party_split_then_four_party_files_and_the_fourth_misses_rows(
    tmp_path,
) -> None:
    pytest.importorskip("vertibench", reason="the VertiBench splits need the bench extra")
    from benchmarks.tabular.tables import LABEL_BLOCK, MISSING, write_parties
    from benchmarks.tabular.vertibench import parties, split_blocks

    assert parties("importance-1-4p") == K + 1 and parties("importance-1") == K
    table = tables(None, True)["gen_categorical"](0, True)
    blocks = split_blocks(table, "importance-1-4p", 0)
    assert len(blocks) == 4 and all(blocks)
    assert sorted(c for b in blocks for c in b) == sorted(table.columns)
    split = write_parties(table, 0, tmp_path, blocks=blocks)
    assert len(split.paths) == 4 and all(p.is_file() for p in split.paths)
    assert split.held.shape == (4, table.rows)
    share = 1 - split.held.mean(axis=1)
    assert abs(share[3] - MISSING[-1]) < 0.06 and abs(share[LABEL_BLOCK] - MISSING[0]) < 0.06
    # three parties: the same rows as before the fourth existed (the first three draws)
    three = write_parties(
        table, 0, tmp_path / "three", blocks=split_blocks(table, "importance-1", 0)
    )
    np.testing.assert_array_equal(three.held, split.held[:3])
