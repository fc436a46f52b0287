"""A party's sample IDs: one spelling of the numbers among them, and one ID per row.

IDs align across parties only as written (their keyed hashes or PSI points are compared, never
the IDs). A number with a zero fraction is written without it, `12345.0` as `12345`: what a
spreadsheet or pandas writes for an integer ID column that had a gap (a float column) then
matches the other parties' `12345`; the spaces around every cell are stripped when the table
is read. Nothing else is changed: leading zeros (`007`), case, spaces inside and prefixes are
the parties' to agree on (a run where they differ is refused before training:
vfl_core.data.tabular in a simulation, vfl_core.training.alignment.check_shared in any run).
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.data import column_values as cv
from vfl_core.data.columns import Table
from vfl_core.errors import DataError

log = logging.getLogger(__name__)

_ZERO_FRACTION = r"^([+-]?[0-9]+)\.0*$"


def normalised_ids(table: Table, id_column: str, unique: bool = True) -> Table:
    """`table` with its ID column as text, numbers with a zero fraction without it; a missing
    ID is an error naming its row, and so is a duplicated one (unless `unique` is False: the
    caller then checks with `check_unique`, given the IDs' split keys)."""
    column = table.column(id_column)
    text = (
        column
        if cv.is_text(column)
        else pa.chunked_array([pa.array(cv.text_cells(column), pa.string())])
    )
    table = table.with_column(id_column, zero_fractions_dropped(text))
    if table.column(id_column).null_count:
        table = without_empty_rows(table, id_column)
    ids = table.column(id_column)
    if ids.null_count:
        row = int(np.flatnonzero(cv.missing(ids))[0])
        raise DataError(f"{table.source}: {table.row_name(row)}, column {id_column!r}: no ID")
    if unique:
        check_unique(table, id_column)
    return table


def without_empty_rows(table: Table, id_column: str) -> Table:
    """`table` without its rows of no cell at all, skipped as blank lines are (a spreadsheet
    writes a formatted empty row as a line of separators: ",,,,"), and said in the log."""
    empty = cv.missing(table.column(id_column))
    for name in table.names:
        if name != id_column and empty.any():
            empty &= table.missing(name)
    if not empty.any():
        return table
    rows = np.flatnonzero(empty)
    log.warning(
        "%s: %d rows with no cell at all skipped, as blank lines are (%s%s)",
        table.source,
        len(rows),
        table.row_name(rows[0]),
        f" to {table.row_name(rows[-1])}" if len(rows) > 1 else "",
    )
    return table.rows(np.flatnonzero(~empty))


def zero_fractions_dropped(text: pa.ChunkedArray) -> pa.ChunkedArray:
    """Text IDs with the zero fraction of numbers among them dropped (`12345.0` as `12345`)."""
    if pc.any(pc.match_substring(text, ".")).as_py():  # most ID columns hold no dot at all
        text = pc.replace_substring_regex(text, _ZERO_FRACTION, r"\1")
    return text


def check_unique(table: Table, id_column: str, keys: np.ndarray | None = None) -> None:
    """A duplicated ID is an error naming it and its two rows. `keys` (split_keys of the IDs):
    IDs with distinct keys are distinct, so the IDs themselves are compared only where two
    keys are equal (a sort of numbers, not a hash table of every ID's text)."""
    ids = table.column(id_column)
    if keys is not None:
        ordered = np.sort(keys)
        if not (ordered[1:] == ordered[:-1]).any():
            return
    elif len(pc.unique(ids)) == len(ids):  # faster than count_distinct on text
        return
    first_row: dict[str, int] = {}
    for row, cell in enumerate(ids.to_pylist()):
        if cell in first_row:
            raise DataError(
                f"{table.source}: duplicate ID {cell!r} at {table.row_name(row)} "
                f"(first at {table.row_name(first_row[cell])})"
            )
        first_row[cell] = row


# ---------------------------------------------------------------- the test split by ID

_SPLIT_SALT = b"vfl-tabular-split\x00"
_HASHED_AT_ONCE = 1 << 14
_DIGEST_BYTES = 32  # SHA-256's


def held_out(ids: pa.ChunkedArray, fraction: float) -> np.ndarray:
    """(n,) bool: True for the test IDs (`in_test` of their split_keys)."""
    return in_test(split_keys(ids), fraction)


def in_test(keys: np.ndarray, fraction: float) -> np.ndarray:
    """(n,) bool: True where an ID's split key, as a share of 2**64, falls below `fraction`."""
    return keys < np.uint64(min(int(fraction * 2**64), 2**64 - 1))


def split_keys(ids: pa.ChunkedArray) -> np.ndarray:
    """(n,) uint64: each ID's salted SHA-256 (its first 8 bytes, big-endian): the same at every
    party that holds the ID, with no word between them. (A hash per ID in Python is a large
    part of the time a large table takes to load; a vectorised one would be faster but would
    move rows between the splits of every table loaded before, and with them the fitted
    preprocessing.)"""
    # a copy of the hash of the salt, updated with the ID: about 10 % less time than hashing
    # salt + ID anew (no concatenation, no setting up of a new hash)
    salted = hashlib.sha256(_SPLIT_SALT).copy
    utf8 = ids.cast(pa.binary())
    out = np.empty(len(ids), dtype=np.uint64)
    for start in range(0, len(ids), _HASHED_AT_ONCE):  # a few Python objects alive at a time
        digests: list[bytes] = []
        add = digests.append
        for sample_id in utf8.slice(start, _HASHED_AT_ONCE).to_pylist():
            hashed = salted()
            hashed.update(sample_id)
            add(hashed.digest())
        # the first 8 of each digest's 32 bytes (cut by numpy, not a slice per ID in Python)
        first = np.frombuffer(b"".join(digests), dtype=">u8")[:: _DIGEST_BYTES // 8]
        out[start : start + len(digests)] = first
    return out


def id_array(column: pa.ChunkedArray) -> np.ndarray:
    """(n,) numpy text (`<U` as long as the longest) of an ID column without missing cells.
    ASCII IDs (most) are copied from Arrow's buffers by numpy, without a Python string each."""
    text = column.combine_chunks()
    if not len(text) or text.null_count or not pc.all(pc.string_is_ascii(text)).as_py():
        return np.array(text.to_pylist(), dtype=str)
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset :][: len(text) + 1]
    data = np.frombuffer(text.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets)
    width = max(int(lengths.max()), 1)
    # numpy text is UCS-4: an ASCII byte is its own code point, one uint32 each (a cast of
    # bytes to text, `S` to `U`, decodes each ID in turn: four times slower)
    if (lengths == width).all():  # IDs of one length (most): each its row of the bytes
        padded = data.reshape(len(text), width).astype(np.uint32)
    else:
        padded = np.zeros((len(text), width), dtype=np.uint32)
        padded[np.arange(width) < lengths[:, None]] = data  # row by row, each ID then NULs
    return padded.view(f"U{width}").ravel()
