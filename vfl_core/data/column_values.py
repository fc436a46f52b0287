"""One column of a party's table as the preprocessing reads it: numbers, days or category codes.

Columns are Arrow arrays: text cells (None where missing) from a CSV file, typed values from a
Parquet file. The happy path is vectorised; where a cell does not fit, the column is walked cell
by cell to name the first that does not (file, row, column, value).
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.data.columns import Table, is_text, text_cells
from vfl_core.errors import DataError

# A text column with at least this share of numbers is a numeric column with stray text cells
MOSTLY_NUMBERS = 0.9
STRAY_EXAMPLES = 3  # stray cells named in the error

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}.*)?")
# a date as a country writes it: 03/01/2024, 3/1/24, 01.03.2024, 01-03-2024 (a time may follow)
# the ISO dates and times Arrow's cast reads as `day` does (ASCII digits, a fraction of at most
# microseconds, a zone as Z or +HH:MM): a column of others is read cell by cell
_ARROW_ISO = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?$"
)
_LOCAL_DATE = r"^(\d{1,2}/\d{1,2}/(\d{2}|\d{4})|\d{1,2}[.-]\d{1,2}[.-]\d{4})([ T]\d{1,2}:\d{2}.*)?$"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_DAY_US = 86400e6


def is_when(column: pa.ChunkedArray) -> bool:
    """A Parquet date or time column."""
    return pa.types.is_date(column.type) or pa.types.is_timestamp(column.type)


def is_number(column: pa.ChunkedArray) -> bool:
    return pa.types.is_integer(column.type) or pa.types.is_floating(column.type)


def missing(column: pa.ChunkedArray) -> np.ndarray:
    """(n,) bool: True where a cell is missing."""
    return column.is_null().to_numpy(zero_copy_only=False)


def days(column: pa.ChunkedArray) -> np.ndarray | None:
    """(n,) float64 days since 1970-01-01 (UTC where a time names no zone), NaN where missing;
    None unless every present cell is a date or an ISO date or time."""
    if is_when(column):
        micros = column.cast(pa.timestamp("us")).cast(pa.int64())
        return micros.to_numpy(zero_copy_only=False).astype(np.float64) / _DAY_US
    if not is_text(column):
        return None
    present = column.drop_null()
    if not len(present) or not _ISO_DATE.fullmatch(present[0].as_py()):
        return None  # every cell must be a date: the first one tells most columns apart
    parsed = _arrow_days(column)
    if parsed is not None:
        return parsed
    out = np.full(len(column), np.nan)
    for row, cell in enumerate(column.to_pylist()):
        if cell is not None:
            day_ = day(cell)
            if day_ is None:
                return None
            out[row] = day_
    return out


def _arrow_days(column: pa.ChunkedArray) -> np.ndarray | None:
    """`days` of a text column by Arrow's ISO 8601 cast, where every present cell is written in
    a form that both it and Python's `fromisoformat` read (_ARROW_ISO) and the cells either all
    name a zone or none does; None otherwise (the cells are then read one by one by `day`).
    The same float64 as `day`'s: whole microseconds (exact in float64 within +-285 years of
    1970) divided by 1e6, then by 86400, as `timedelta.total_seconds() / 86400` divides them."""
    if not pc.all(pc.match_substring_regex(column, _ARROW_ISO)).as_py():
        return None
    for kind in (pa.timestamp("us"), pa.timestamp("us", tz="UTC")):
        try:
            micros = column.cast(kind).cast(pa.int64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue  # a zone named (or not) where the type says otherwise
        micros = micros.astype(np.float64, copy=False)  # NaN where missing
        if not np.nanmax(np.abs(micros)) < 2.0**53:
            return None
        return micros / 1e6 / 86400.0
    return None


def may_be_days(values: pa.Array) -> bool:
    """Whether every cell is written as an ISO date or time (`days` then tells whether each is
    one): a column's distinct cells tell most columns apart without a pass over its rows. (Any
    Unicode digit is `_ISO_DATE`'s `\\d`, Arrow's only 0-9: a cell of other digits is no date to
    `fromisoformat` either.)"""
    ascii_iso = _ISO_DATE.pattern.replace("\\d", "[0-9]")
    return bool(pc.all(pc.match_substring_regex(values, f"^{ascii_iso}$")).as_py())


def day(cell: str) -> float | None:
    """An ISO date or time as days since 1970-01-01 (UTC where it names no zone), or None."""
    if not _ISO_DATE.fullmatch(cell):
        return None
    try:
        when = datetime.datetime.fromisoformat(cell)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return (when - _EPOCH).total_seconds() / 86400.0


def finite_number(cell: str) -> bool:
    """A finite number as Arrow's CSV reader reads one. Python's float() also takes digit
    separators ('1_000') and other scripts' digits ('١٢'), which Arrow reads as text: counted as
    numbers here, such a cell would turn its whole column into categories, unrefused."""
    if "_" in cell or not cell.isascii():
        return False
    try:
        return math.isfinite(float(cell))
    except ValueError:
        return False


def all_finite_numbers(cells: Sequence[str]) -> bool:
    return all(finite_number(cell) for cell in cells)


def first_bad_row(column: pa.ChunkedArray, fits: Callable[[str], bool]) -> int | None:
    """The first row whose present cell does not satisfy `fits(cell)`, or None."""
    for row, cell in enumerate(column.to_pylist()):
        if cell is not None and not fits(cell):
            return row
    return None


def refuse_stray_text(table: Table, name: str, values: pa.Array, counts: np.ndarray) -> None:
    """A text column whose present cells are numbers but for a few (under 1 - MOSTLY_NUMBERS of
    them: 'forty thousand' among incomes, '-', 'inf') is refused, naming the cells: read as
    categories it would have a category per distinct number, and read as numbers the cells
    would be lost. Each must be written as a number, or left empty where it means missing.
    `values`, `counts`: the column's distinct present cells in `table` and how often each
    occurs (Table.value_counts)."""
    present = int(counts.sum())
    allowed = (1 - MOSTLY_NUMBERS) * present
    stray: list[str] = []
    cells = 0
    for value, count in zip(values.to_pylist(), counts.tolist(), strict=True):
        if not finite_number(value):
            stray.append(value)
            cells += count
            if cells > allowed:
                return  # a text column, with some numbers among its categories
    if not stray:
        return
    column = table.column(name)
    rows = np.flatnonzero(
        pc.is_in(column, value_set=pa.array(stray, pa.string())).to_numpy(zero_copy_only=False)
    )
    shown = ", ".join(
        f"{column[int(r)].as_py()!r} at {table.row_name(int(r))}" for r in rows[:STRAY_EXAMPLES]
    )
    more = f" and {len(rows) - STRAY_EXAMPLES} more" if len(rows) > STRAY_EXAMPLES else ""
    raise DataError(
        f"{table.source}: column {name!r} holds numbers but for {len(rows)} of its {present} "
        f"training cells: {shown}{more}. Write each as a number, or leave it empty where it "
        "means missing"
    )


def refuse_local_dates(table: Table, name: str, values: pa.Array) -> None:
    """A text column whose every present cell is a date written a country's way (03/01/2024,
    01.03.2024), or some that way and the rest ISO dates, is refused, naming its first such
    cell: read as categories its order and distances would be lost, and whether 03/01 is March
    1st or January 3rd only the user knows. ISO dates (2024-03-01) alone are read as dates
    (`days`). `values`: the column's distinct present cells in
    `table`."""
    local = pc.match_substring_regex(values, _LOCAL_DATE)
    # ISO dates beside them (one column of two systems' exports) are refused alike
    iso = pc.match_substring_regex(values, f"^{_ISO_DATE.pattern}$")
    if not len(values) or not pc.any(local).as_py() or not pc.all(pc.or_(local, iso)).as_py():
        return
    column = table.column(name)
    found = pc.fill_null(pc.match_substring_regex(column, _LOCAL_DATE), False)
    row = int(np.flatnonzero(found.to_numpy(zero_copy_only=False))[0])
    mixed = "" if pc.all(local).as_py() else ", beside ISO dates"
    raise DataError(
        f"{table.source}: column {name!r} holds dates written as {column[row].as_py()!r} "
        f"({table.row_name(row)}){mixed}: only ISO dates (2024-03-01) are read as dates, since "
        "the day and month of another way are ambiguous; write them as ISO dates, or leave the "
        "column out (--features)"
    )


def category_index(column: pa.ChunkedArray, categories: Sequence[str]) -> np.ndarray:
    """Per cell: the category's index, len(categories) if unknown, -1 if missing."""
    text = column if is_text(column) else as_text(column)
    found = pc.index_in(text, value_set=pa.array(list(categories), pa.string()))
    index = pc.fill_null(found, len(categories)).to_numpy(zero_copy_only=False).astype(np.int64)
    index[missing(column)] = -1
    return index


def category_lookup(
    table: Table, name: str, categories: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Column `name` of `table` as (codes, index): (n,) a code per cell and, per code, the
    category's index (len(categories) if unknown, -1 if missing), so that index[codes] is the
    column's `category_index`. A text column's codes are its dictionary codes: the categories
    are looked up once per distinct cell, not once per cell."""
    if not is_text(table.data.column(name)):
        index = category_index(table.column(name), categories)
        return index, np.append(np.arange(len(categories) + 1), -1)  # each its own; -1 last
    codes, values = table.codes(name)
    found = pc.index_in(values, value_set=pa.array(list(categories), pa.string()))
    per_value = pc.fill_null(found, len(categories)).to_numpy(zero_copy_only=False)
    # code -1 (missing) picks the -1 appended at the end
    return codes, np.append(per_value.astype(np.int64), -1)


def as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A typed column's cells as text (columns.text_cells: an integer's decimal digits)."""
    return pa.chunked_array([pa.array(text_cells(column), pa.string())])
