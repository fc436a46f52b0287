"""Numeric columns that look like identifiers: a different whole number in every row, filling
much of their range (a row number, another system's customer key). Read as a number, such a
column teaches nothing that carries over to new samples; and where it is the party's real
sample ID, the file's ID column is something else (measured: a party keyed its
rows by 'customer' and kept its own row numbers in a column 'id', so `--id-column id` matched
row numbers against the other parties' customers, 76.24% against 83.98%, and nothing said it;
benchmarks/results/table_qa.md). Text columns with a value of their own in almost every row are
warned about by the fit (vfl_core.data.preprocess); this is the numeric side. Said, never
changed: only the party knows what the column is.

A column is named when its present cells in the whole file (both splits) are at least
MIN_ROWS whole numbers, all different, covering at least MIN_COVER of the whole numbers between
the smallest and the largest. A look at the first PEEK cells first, so that most columns
(fractions, or repeated values) cost no sort of the whole column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vfl_core.data.columns import Table
    from vfl_core.data.preprocess import TabularPreprocessor

MIN_ROWS = 50
MIN_COVER = 0.3
PEEK = 1000


def id_like_columns(table: Table, fitted: TabularPreprocessor) -> list[tuple[str, int]]:
    """The numeric columns of `fitted` (not dates) that look like identifiers in the file
    `table`'s rows are picked from: (column, its distinct values), in the fit's order."""
    found = []
    for spec in fitted.columns:
        if spec.kind != "numeric" or spec.dates:
            continue
        whole, _ = table.file_floats(spec.name)
        count = None if whole is None else _distinct_whole(whole)
        if count is not None:
            found.append((spec.name, count))
    return found


def _distinct_whole(values: np.ndarray) -> int | None:
    """How many values there are where `values` ((N,) float64, NaN missing) look like
    identifiers, else None."""
    for cells in (values[:PEEK], values):
        present = cells[~np.isnan(cells)]
        if not np.array_equal(present, np.floor(present)) or len(np.unique(present)) < len(present):
            return None
    present = values[~np.isnan(values)]
    if len(present) < MIN_ROWS:
        return None
    span = float(present.max() - present.min()) + 1
    return len(present) if len(present) >= MIN_COVER * span else None


def id_like_warning(source: str, found: list[tuple[str, int]], id_column: str, block: int) -> str:
    """What a party is told of its identifier-like numeric columns (without "warning: ")."""
    shown = ", ".join(f"{name!r} ({count} values)" for name, count in found)
    one = len(found) == 1
    names = ",".join(name for name, _ in found)
    return (
        f"{source}: {'column' if one else 'columns'} {shown} {'holds' if one else 'hold'} a "
        "different whole number in every row, like an identifier (a row number or a key): as "
        f"a number it teaches nothing new samples share; leave it out (--ignore-columns "
        f"{names}; vfl simulate: --ignore-columns {block}:{names}), and if it is this party's "
        f"sample ID, name it so (the ID column read is {id_column!r})"
    )
