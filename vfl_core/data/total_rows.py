"""A spreadsheet's totals line left at the bottom of an export (`Total,3728830.77,8341.00,,`):
read as one more sample whose amounts are the sums of the others', it stretches each such
column's standard deviation about sqrt(n)-fold and squeezes every real sample's values towards
the mean. It was measured on a generated bank table, a totals row at the foot
of both feature-only parties' files: 78.82% against 83.98% without it, and nothing said it
(benchmarks/results/table_qa.md).

Said when a party fits its preprocessing, never changed: the party knows whether the row is a
sample. A row is named when, in at least one numeric column (not dates) of at least MIN_ROWS
non-zero cells, its value is the largest in size and equals the sum of every other row's to
within TOLERANCE of itself. Looked for in the whole file (a totals row in the test split is no
sample either), on the numbers the fit worked out for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vfl_core.data.columns import Table
    from vfl_core.data.preprocess import TabularPreprocessor

MIN_ROWS = 10
TOLERANCE = 1e-3


def total_row_warnings(
    splits: dict[str, Table], fitted: TabularPreprocessor, id_column: str
) -> tuple[str, ...]:
    """What a party is told of each totals row of its file (without "warning: ")."""
    numeric = [s.name for s in fitted.columns if s.kind == "numeric" and not s.dates]
    first = next(iter(splits.values()))
    rows: dict[int, list[str]] = {}
    for name in numeric:
        whole, _ = first.file_floats(name)
        row = None if whole is None else _sum_row(whole)
        if row is not None:
            rows.setdefault(row, []).append(name)
    return tuple(_warning(splits, row, names, id_column) for row, names in rows.items())


def _sum_row(values: np.ndarray) -> int | None:
    """The row of `values` ((N,) float64, NaN where missing) that is the sum of the others.
    Reductions that copy nothing first (a column with gaps sums again without them): 3-8 ms
    for the 13 numeric columns of benchmarks.table_read's 200,000 rows, where NaN-aware copies
    of each took 21-40 ms."""
    if not len(values):
        return None
    high, low = float(np.fmax.reduce(values)), float(np.fmin.reduce(values))
    value = high if abs(high) >= abs(low) else low
    total = float(np.add.reduce(values))
    if np.isnan(total):
        total = float(np.nansum(values))
    if np.isnan(value) or abs(2 * value - total) > TOLERANCE * abs(value):
        return None
    if np.count_nonzero(values) - np.count_nonzero(np.isnan(values)) <= MIN_ROWS:
        return None  # NaN counts as non-zero
    return int(np.flatnonzero(values == value)[0])


def _warning(splits: dict[str, Table], row: int, names: list[str], id_column: str) -> str:
    """The warning naming file row `row` by its line (or row) and ID, and its columns."""
    for table in splits.values():
        _, take = table.file_floats(names[0])
        at = np.arange(len(table)) if take is None else take
        found = np.flatnonzero(at == row)
        if len(found):
            here = int(found[0])
            where = f"{table.row_name(here)} (ID {table.column(id_column)[here].as_py()!r})"
            break
    else:  # not reached: every row of the file is in a split
        where = f"row {row}"
    listed = ", ".join(map(repr, names))
    what = "column" if len(names) == 1 else "columns"
    source = next(iter(splits.values())).source
    return (
        f"{source}: {where} looks like a totals row: in {what} {listed} it is the sum of "
        "every other row's; as a sample it stretches each such column's scale and squeezes "
        "the real samples' values together; leave the row out of the file if it is no sample"
    )
