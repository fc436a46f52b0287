"""Numbers written the way a CSV file's locale writes them, as plain numbers (on Arrow columns).

In a `;`-separated file (a European spreadsheet's export): decimal commas (3,25) and dots between
digit groups (1.234,5); in any other: commas between digit groups (1,234.5, quoted in a
comma-separated file). Dots or commas that could also be decimal ones (1.234 or 1,234 alone)
count as groups only in a column where some number can only be read with groups. A column that
is not numbers once so read stays as written.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Numbers = np.ndarray | None
_FIRST = 64  # cells tried before a whole column
_NUMBERISH = re.compile(r"[+-]?[0-9.,]+([eE][+-]?[0-9]+)?")

_DECIMAL_COMMA = r"^[+-]?([0-9]+,[0-9]*|,[0-9]+)([eE][+-]?[0-9]+)?$"


def _grouped(group: str, decimal: str) -> tuple[str, str]:
    """A number with digit groups (1.234.567,8 or 1,234,567.8), and one that can only be read
    that way: two groups or more, or groups and decimals (1.234 alone may be 1.234)."""
    g, d = "\\" + group, "\\" + decimal
    return (
        rf"^[+-]?[0-9]{{1,3}}({g}[0-9]{{3}})+({d}[0-9]*)?$",
        rf"^[+-]?[0-9]{{1,3}}(({g}[0-9]{{3}}){{2,}}({d}[0-9]*)?|{g}[0-9]{{3}}{d}[0-9]*)$",
    )


_GROUPED = {";": _grouped(".", ","), ",": _grouped(",", ".")}


def local_numbers(column: pa.ChunkedArray, separator: str) -> tuple[pa.ChunkedArray, Numbers]:
    """`column` (text, nulls where missing) with its numbers written plainly, where every cell
    is a number in the locale of a file separated by `separator`, else as it is; and its
    values ((n,) float64, NaN where missing) where every cell is a number."""
    values = floats(column)
    if values is not None:
        return column, values
    if not _numberish(column):
        return column, None
    grouped, certain = _GROUPED[";" if separator == ";" else ","]
    commas = separator == ";" and _any(pc.match_substring_regex(column, _DECIMAL_COMMA))
    if not commas and not _any(pc.match_substring_regex(column, certain)):
        return column, None
    group, decimal = (".", ",") if separator == ";" else (",", ".")
    plain = pc.if_else(
        pc.match_substring_regex(column, grouped), pc.replace_substring(column, group, ""), column
    )
    plain = pc.replace_substring(plain, decimal, ".")
    values = floats(plain)
    return (column, None) if values is None else (plain, values)


def _numberish(column: pa.ChunkedArray) -> bool:
    """Whether the first present cells are all digits, signs, separators and exponents: a
    column of words is told apart at once (the regular expressions below walk every cell)."""
    first = column.drop_null().slice(0, _FIRST).to_pylist()
    return all(_NUMBERISH.fullmatch(cell) for cell in first)


def floats(column: pa.ChunkedArray | pa.Array) -> Numbers:
    """(n,) float64 of a text column, NaN where missing; None if a present cell is not a
    number."""
    try:
        # a text column fails on its first cells: Arrow parses a whole chunk before it says so
        column.slice(0, _FIRST).cast(pa.float64())
        values = column.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return values.to_numpy(zero_copy_only=False)


def _any(mask: pa.ChunkedArray) -> bool:
    return bool(pc.any(mask).as_py())
