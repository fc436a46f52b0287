"""A party's table options checked against a saved fitted preprocessing (vfl prepare
--preprocessing, a restarted client's kept fit, vfl export): the fit decides the task, the label
column, the positive class and the columns, so an option that says otherwise is refused by name
rather than silently overridden. Given the same as when fitted (a restarted party repeats its
options), every option passes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl_core.errors import ConfigError

if TYPE_CHECKING:  # tabular imports this module
    from vfl_core.data.preprocess import TabularPreprocessor
    from vfl_core.data.table_source import TableSource

REFIT = "it decides the columns; fit again without it to change them"


def check_against_fit(source: TableSource, fitted: TabularPreprocessor) -> None:
    """Every option of `source` that `fitted` fixes agrees with it (a ConfigError naming the
    first that does not): --task, --label-column, --positive-class, --features, --categorical
    and --ignore-columns. (--max-onehot always has a value, so a given one cannot be told from
    its default: the fit's categories decide.)"""
    if fitted.task != source.task:
        raise ConfigError(
            f"the fitted preprocessing is for a {fitted.task} task, not {source.task} (--task)"
        )
    _check_label_column(source.label_column, fitted.label_column)
    _check_positive(source.positive_class, fitted.classes)
    kinds = {c.name: c.kind for c in fitted.columns}
    if source.features is not None:
        _check_same_features(source.features, list(kinds))
    for name in source.categorical:
        if kinds.get(name, "numeric") == "numeric":
            raise ConfigError(
                f"--categorical: {name!r} is not a categorical column of the fitted "
                f"preprocessing ({REFIT})"
            )
    for name in source.ignore_columns:
        if name in kinds:
            raise ConfigError(
                f"--ignore-columns: {name!r} is a column of the fitted preprocessing ({REFIT})"
            )


def _check_label_column(given: str | None, fitted: str | None) -> None:
    """A label column given must be the fit's (none given: the fit's is read)."""
    if given is None or given == fitted:
        return
    held = "no label column" if fitted is None else f"the label column {fitted!r}"
    raise ConfigError(
        f"--label-column {given!r}: the fitted preprocessing has {held} (its classes and "
        "weights are that column's; fit again to change it)"
    )


def _check_positive(positive: str | None, classes: tuple[str, ...]) -> None:
    """A reused preprocessing keeps its classes' order: a --positive-class it does not have as
    its positive class is refused rather than silently ignored."""
    if positive is None or not classes:
        return
    if len(classes) != 2 or classes[1] != positive:
        raise ConfigError(
            f"--positive-class {positive!r}: the fitted preprocessing's classes are "
            f"{list(classes)} (its positive class is the last); refit to change it"
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
