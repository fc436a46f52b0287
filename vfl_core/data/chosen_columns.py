"""Which columns of a party's table are its features, from its options (--features,
--ignore-columns, --categorical): every name checked against the file's columns. Against a
saved fitted preprocessing they are checked in vfl_core.data.fitted_options."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl_core.data.columns import Table
from vfl_core.errors import ConfigError, DataError

if TYPE_CHECKING:  # tabular imports this module
    from vfl_core.data.table_source import TableSource


def feature_columns(source: TableSource, table: Table) -> list[str]:
    """The columns `source` trains on in `table` (its training rows), in order: --features,
    else every column but the ID, the label and --ignore-columns. A name the file lacks is a
    DataError listing its columns; the ID or label, both --features and --ignore-columns, or a
    --categorical column left out, a ConfigError."""
    reserved = {source.id_column, source.label_column}
    for option, names in (
        ("--features", source.features or ()),
        ("--ignore-columns", source.ignore_columns),
        ("--categorical", source.categorical),
    ):
        _check_named(table, option, names, reserved)
    if source.features is not None and source.ignore_columns:
        raise ConfigError("give --features (the columns to keep) or --ignore-columns, not both")
    if source.features is None:
        left_out = reserved | set(source.ignore_columns)
        columns = [name for name in table.names if name not in left_out]
        if not columns:
            raise DataError(f"{table.source}: no feature columns besides the ID and label")
    else:
        columns = list(dict.fromkeys(source.features))
    unused = [name for name in source.categorical if name not in columns]
    if unused:
        raise ConfigError(f"--categorical: {', '.join(map(repr, unused))} left out of the features")
    return columns


def _check_named(
    table: Table, option: str, names: tuple[str, ...], reserved: set[str | None]
) -> None:
    """Every column `option` names is in the file and is neither the ID nor the label."""
    unknown = [name for name in names if name not in table.names]
    if unknown:
        what = "feature column" if option == "--features" else "column"
        raise DataError(
            f"{table.source}: no {what} {', '.join(map(repr, unknown))} ({option}; the file's "
            f"columns: {', '.join(table.names)}){_comma_hint(table.names, names, unknown)}"
        )
    for name in names:
        if name in reserved:
            raise ConfigError(f"{option}: {name!r} is the ID or label column")


def _comma_hint(columns: list[str], names: tuple[str, ...], unknown: list[str]) -> str:
    """Where the file has a column whose name holds a comma and the option's list was cut
    there ("b,c" given as b and c), how to write it."""
    cut = [
        column
        for column in columns
        if "," in column
        and set(_parts(column)) <= set(names)
        and set(_parts(column)) & set(unknown)
    ]
    if not cut:
        return ""
    written = ", ".join(column.replace("\\", "\\\\").replace(",", "\\,") for column in cut)
    return f"; a comma inside a name is written \\, ({written})"


def _parts(name: str) -> list[str]:
    return [part.strip() for part in name.split(",") if part.strip()]
