"""Which columns of a party's table are its features, from its options (--features,
--ignore-columns, --categorical): every name checked against the file's columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl_core.data.columns import Table
from vfl_core.errors import ConfigError, DataError

if TYPE_CHECKING:  # tabular imports this module
    from vfl_core.data.preprocess import TabularPreprocessor
    from vfl_core.data.tabular import TableSource


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


def check_fitted_columns(source: TableSource, fitted: TabularPreprocessor) -> None:
    """--features, --categorical and --ignore-columns given with a fitted preprocessing must
    agree with it (a restarted party gives the same options): the fit, not the options,
    decides."""
    kinds = {c.name: c.kind for c in fitted.columns}
    if source.features is not None:
        _check_same_features(source.features, list(kinds))
    for name in source.categorical:
        if kinds.get(name, "numeric") == "numeric":
            raise ConfigError(
                f"--categorical: {name!r} is not a categorical column of the fitted "
                "preprocessing (it decides the columns; fit again without it to change them)"
            )
    for name in source.ignore_columns:
        if name in kinds:
            raise ConfigError(
                f"--ignore-columns: {name!r} is a column of the fitted preprocessing (it decides "
                "the columns; fit again without it to change them)"
            )


def _check_same_features(given: tuple[str, ...], fitted: list[str]) -> None:
    """--features names the fitted columns, in any order; a column on one side only is named
    with its side (the fit's columns are what the party's weights were trained on)."""
    only_given = [name for name in dict.fromkeys(given) if name not in fitted]
    only_fitted = [name for name in fitted if name not in given]
    sides = [
        f"{', '.join(map(repr, names))} only in {side}"
        for names, side in (
            (only_given, "--features"),
            (only_fitted, "the fitted preprocessing"),
        )
        if names
    ]
    if sides:
        raise ConfigError(
            f"--features differs from the fitted preprocessing's columns: {'; '.join(sides)} "
            "(it decides the columns; fit again to change them)"
        )


def _check_named(
    table: Table, option: str, names: tuple[str, ...], reserved: set[str | None]
) -> None:
    """Every column `option` names is in the file and is neither the ID nor the label."""
    unknown = [name for name in names if name not in table.names]
    if unknown:
        what = "feature column" if option == "--features" else "column"
        raise DataError(
            f"{table.source}: no {what} {', '.join(map(repr, unknown))} ({option}; the file's "
            f"columns: {', '.join(table.names)})"
        )
    for name in names:
        if name in reserved:
            raise ConfigError(f"{option}: {name!r} is the ID or label column")
