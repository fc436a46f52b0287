"""The QA tables of issue 27's sixth stop (gen_wide, gen_multiclass) and the wide-shapes
screen: the tables have the shapes the docs quote, and the screen's summary counts runs against
the defaults' of the same shape and seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.tabular_tables import K, column_blocks, tables
from benchmarks.tabular_wide_shapes import shape_table, summarise


def test_given_gen_wide_then_200_columns_on_1000_rows_dealt_67_66_67_and_two_classes() -> None:
    table = tables(None, False)["gen_wide"](0, False)
    assert (table.rows, len(table.columns)) == (1000, 200)
    assert sorted({len(b) for b in column_blocks(table)}) == [66, 67]
    assert len(column_blocks(table)) == K
    assert set(table.label) == {"c0", "c1"}


def test_given_gen_multiclass_then_three_balanced_classes_on_9_numeric_columns() -> None:
    table = tables(None, False)["gen_multiclass"](1, False)
    assert (table.rows, len(table.columns), table.categorical) == (3000, 9, ())
    _, counts = np.unique(table.label, return_counts=True)
    assert len(counts) == 3 and counts.min() > 0.3 * table.rows


def test_given_the_gen_wide_shape_then_the_benchmark_table_cell_for_cell() -> None:
    mine, theirs = shape_table("gen_wide", 2), tables(None, False)["gen_wide"](2, False)
    assert list(mine.columns) == list(theirs.columns)
    assert all(np.array_equal(mine.columns[c], theirs.columns[c]) for c in mine.columns)
    assert np.array_equal(mine.label, theirs.label)


def test_given_runs_when_summarised_then_each_setting_counted_against_defaults_by_seed(
    tmp_path: Path,
) -> None:
    accuracies = {"defaults": (0.70, 0.80, 0.75), "wd1e-1": (0.72, 0.80, 0.60)}
    for setting, values in accuracies.items():
        (tmp_path / setting).mkdir()
        for seed, value in enumerate(values):
            record = {"accuracy": value, "rows_per_column": [10.8, 8.3, 8.5]}
            (tmp_path / setting / f"w400-s{seed}.json").write_text(json.dumps(record))
    table = summarise(tmp_path)
    assert "w400 (8.3)" in table
    assert "| wd1e-1 | 70.67 | 1 / 1 / 1 |" in table
    assert "| defaults | 75.00 |  |" in table
