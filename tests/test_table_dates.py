"""Where vfl_core.data uses Arrow in place of per-cell Python: ISO dates and times of a CSV
column read by Arrow's cast (column_values.days), the same float64 days, bit for bit, as
Python's `fromisoformat` cell by cell (`day`), and the same cells refused (a column Arrow does
not read alike is read cell by cell as before); a text column's dictionary codes joined by
Arrow's concatenation (columns.dictionary_codes)."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from vfl_core.data import column_values as cv
from vfl_core.data.columns import dictionary_codes


def by_cell(cells: list[str | None]) -> np.ndarray | None:
    """`days` as it was: each cell through `day`, None if one is not a date."""
    out = np.full(len(cells), np.nan)
    for row, cell in enumerate(cells):
        if cell is not None:
            value = cv.day(cell)
            if value is None:
                return None
            out[row] = value
    return out


def same(got: np.ndarray | None, want: np.ndarray | None) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return bool(np.array_equal(got.view(np.uint64), want.view(np.uint64)))


CELLS = [
    "2024-03-01",
    "1970-01-01",
    "1969-12-31",
    "1700-02-28",
    "2250-12-31",
    "2024-02-29",
    "2023-02-29",  # no such day
    "2024-13-01",
    "2024-03-01 12:00:00",
    "2024-03-01T18:00",
    "2024-03-01T09:30:00.5",
    "2024-03-01T09:30:00.123456",
    "2024-03-01T09:30:00.1234567",
    "2024-03-01T09:30:00,5",
    "2024-03-01T24:00:00",
    "2024-03-01T23:59:60",
    "2024-03-01T09:61:00",
    "2024-03-01T09:30:00Z",
    "2024-03-01T09:30:00+01:00",
    "2024-03-01T09:30:00-05:30",
    "2024-03-01T09:30:00+0100",
    "2024-03-01T09:30:00+01",
    "2024-03-01T09:30:00 UTC",
    "2024-03-01T9:30",
    "2024-3-01",
]


@pytest.mark.parametrize("cell", CELLS)
def test_given_one_cell_then_arrow_days_are_python_days_bit_for_bit(cell: str) -> None:
    cells = [cell, None, cell]
    assert same(cv.days(pa.chunked_array([cells])), by_cell(cells))


def test_given_zones_named_in_some_cells_only_then_read_cell_by_cell_alike() -> None:
    cells = ["2024-03-01T09:30:00", "2024-03-01T09:30:00+01:00", None, "2024-03-02"]
    got = cv.days(pa.chunked_array([cells[:2], cells[2:]]))
    assert got is not None and same(got, by_cell(cells))


def test_given_many_random_times_then_the_same_days_as_cell_by_cell() -> None:
    gen = np.random.default_rng(7)
    start = datetime.datetime(1800, 1, 1)
    cells: list[str | None] = []
    for seconds, micros, form in zip(
        gen.integers(0, 400 * 365 * 86400, 3000),
        gen.integers(0, 10**6, 3000),
        gen.integers(0, 5, 3000),
        strict=True,
    ):
        when = start + datetime.timedelta(seconds=int(seconds), microseconds=int(micros))
        cells.append(
            [
                when.date().isoformat(),
                when.isoformat(sep=" ", timespec="seconds"),
                when.isoformat(timespec="microseconds"),
                when.isoformat(timespec="milliseconds"),
                None,
            ][int(form)]
        )
    zoned = [None if c is None else c + "+02:00" for c in cells if c is None or ":" in c]
    for column in (cells, zoned):
        assert same(cv.days(pa.chunked_array([column])), by_cell(column))


@pytest.mark.parametrize("cell", ["２０２４-03-01", "2024-03-0١"])
def test_given_other_digits_than_ascii_then_no_date_as_before(cell: str) -> None:
    # Python's \d takes any Unicode digit, Arrow's regular expressions 0-9 only: fromisoformat
    # reads neither kind as a date, so the column is no dates column either way
    cells = [cell, "2024-03-02"]
    assert by_cell(cells) is None
    assert not cv.may_be_days(pa.array(cells))
    assert cv.days(pa.chunked_array([cells])) is None


def test_given_distinct_cells_then_may_be_days_as_the_regular_expression_says() -> None:
    cells = ["2024-03-01", "2024-03-01T09:30:00+01:00", "2024-03-01 09:30 CET"]
    assert cv.may_be_days(pa.array(cells))
    assert not cv.may_be_days(pa.array([*cells, "03/01/2024"]))


def test_given_a_column_in_many_chunks_when_encoded_then_codes_as_one_chunk_encoded() -> None:
    # dictionary_codes joins the chunks by Arrow's concatenation (unify_dictionaries took
    # seconds for a column of many distinct cells in many chunks): the same codes, in the
    # order of first appearance, as the column encoded in one chunk
    gen = np.random.default_rng(5)
    cells = [None if i % 97 == 0 else f"v{i}" for i in gen.integers(0, 5000, 20_000)]
    column = pa.chunked_array([cells[i : i + 300] for i in range(0, len(cells), 300)], pa.string())
    codes, values = dictionary_codes(column)
    one = pc.dictionary_encode(pa.array(cells, pa.string()))
    assert codes.tolist() == pc.fill_null(one.indices, -1).to_pylist()
    assert values.equals(one.dictionary) and codes.dtype == np.int32
