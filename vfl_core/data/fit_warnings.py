"""What fitting a party's preprocessing tells the party of its own columns and rows: numbers
that look like codes (vfl_core.data.code_columns), numbers a spreadsheet formatted, read as
text (formatted_numbers), totals rows (total_rows) and whole numbers that look like
identifiers (id_like_columns). Each is said, never changed: `vfl prepare` and `vfl simulate`
print them as "warning: " lines, `vfl-client` logs them; a reused fit is not judged again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl_core.data.code_columns import code_columns_warning, code_like_columns
from vfl_core.data.formatted_numbers import formatted_columns, formatted_columns_warning
from vfl_core.data.id_like_columns import id_like_columns, id_like_warning
from vfl_core.data.total_rows import total_row_warnings

if TYPE_CHECKING:
    from vfl_core.data.columns import Table
    from vfl_core.data.preprocess import TabularPreprocessor
    from vfl_core.data.table_source import TableSource


def fit_warnings(
    source: TableSource, fitting: Table, fitted: TabularPreprocessor, splits: dict[str, Table]
) -> tuple[str, ...]:
    """The warnings of a fit: `fitting` the training rows' feature columns it was fitted on,
    `splits` the party's rows (with their IDs)."""
    path, block = str(source.path), source.block
    out = []
    if codes := code_like_columns(fitting, fitted):
        out.append(code_columns_warning(path, codes, block))
    if formatted := formatted_columns(fitted, source.categorical):
        out.append(formatted_columns_warning(path, formatted, block))
    out += total_row_warnings(splits, fitted, source.id_column)
    if ids := id_like_columns(fitting, fitted):
        out.append(id_like_warning(path, ids, source.id_column, block))
    return tuple(out)
