"""Options for a party's own table (CSV or Parquet), shared by `vfl-client`, `vfl prepare` and
`vfl simulate`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vfl_cli import defaults
from vfl_core.errors import ConfigError

if TYPE_CHECKING:  # torch and numpy: imported where a table is read, not for --help
    from vfl_core.data.learning_task import Task
    from vfl_core.data.tabular import TableSource

Opt = typer.Option

IdColumn = Annotated[str | None, Opt(help="table: the sample ID column (required for a table)")]
LabelColumn = Annotated[
    str | None, Opt(help="table: the label column (omit for a feature-only party)")
]
Features = Annotated[
    str | None,
    Opt(
        help="table: feature columns, e.g. age,city (a comma inside a name written \\,)",
        show_default="all but ID and label",
    ),
]
IgnoreColumns = Annotated[
    str | None,
    Opt(
        help="table: columns to leave out, e.g. notes,zip (not with --features)",
        show_default="none",
    ),
]
Categorical = Annotated[
    str | None,
    Opt(
        help="table: columns that are categories whatever their cells, e.g. zip,product (codes "
        "written as numbers; each cell as written)",
        show_default="text columns",
    ),
]
TestFraction = Annotated[
    float,
    Opt(help="table without a test file: share of IDs in the test split (chosen by ID hash)"),
]
Clients = Annotated[
    int | None, Opt(help="number of parties K in the federation (required for a table)")
]
NumClasses = Annotated[
    int | None,
    Opt(help="table, feature-only party of a classification: the label parties' class count"),
]
TaskOption = Annotated[
    str | None,
    Opt(
        "--task",
        help="table: classification | regression (labels are real numbers); every party of the "
        "federation gives the same",
        show_default="classification",
    ),
]
MaxOnehot = Annotated[
    int, Opt(help="table: categorical columns with more values get a learned embedding")
]
PositiveClass = Annotated[
    str | None,
    Opt(
        help="table, binary label: the class F1, AUC, Brier and the threshold are about",
        show_default="the class that sorts last (yes of no/yes, 1 of 0/1)",
    ),
]
ESCAPE = "\\"  # before a comma: a comma inside a column name
DEFAULTS = {"test_fraction": defaults.TEST_FRACTION, "max_onehot": defaults.MAX_ONEHOT}


def parse_task(task: str | None) -> Task:
    """The --task of a table (default classification)."""
    if task is None:
        return "classification"
    if task not in defaults.TASKS:
        raise ConfigError(f"--task: unknown task {task!r} (use {' or '.join(defaults.TASKS)})")
    return task  # type: ignore[return-value]  # checked against TASKS just above


@dataclass(frozen=True)
class TableColumns:
    """Which columns of a party's table hold the IDs, the label and the features."""

    id_column: IdColumn = None
    label_column: LabelColumn = None
    features: Features = None
    ignore_columns: IgnoreColumns = None
    categorical: Categorical = None


@dataclass(frozen=True)
class TableEncoding:
    """How a party's table becomes its block of the federation: the task, the class count of
    a feature-only party, and the one-hot limit for categorical columns."""

    num_classes: NumClasses = None
    max_onehot: MaxOnehot = defaults.MAX_ONEHOT
    task: TaskOption = None
    positive_class: PositiveClass = None


def table_source(
    path: Path,
    columns: TableColumns,
    encoding: TableEncoding,
    *,
    test_path: Path | None,
    test_fraction: float,
    block: int | None,
    clients: int | None,
) -> TableSource:
    """Check the options a table needs and build its TableSource."""
    from vfl_core.data.tabular import TableSource  # numpy and torch: not for --help

    for value, option in ((columns.id_column, "--id-column"), (block, "--block")):
        if value is None:
            raise ConfigError(f"{path}: a CSV/Parquet party needs {option}")
    if clients is None:
        raise ConfigError(f"{path}: a CSV/Parquet party needs --clients (the number of parties K)")
    features = None if columns.features is None else feature_names(columns.features)
    if features is not None and columns.ignore_columns is not None:
        raise ConfigError("give --features (the columns to keep) or --ignore-columns, not both")
    return TableSource(
        path=path,
        id_column=columns.id_column,
        label_column=columns.label_column,
        features=features,
        ignore_columns=_names(columns.ignore_columns, "--ignore-columns"),
        categorical=_names(columns.categorical, "--categorical"),
        test_path=test_path,
        test_fraction=test_fraction,
        block=block,
        num_blocks=clients,
        num_classes=encoding.num_classes,
        max_onehot=encoding.max_onehot,
        task=parse_task(encoding.task),
        positive_class=encoding.positive_class,
    )


def _names(value: str | list[object] | None, option: str) -> tuple[str, ...]:
    return () if value is None else feature_names(value, option)


def feature_names(value: str | list[object], option: str = "--features") -> tuple[str, ...]:
    """The column names of a --features value: comma-separated, `\\,` a comma inside a name
    (a config file may give a list, each item one name), spaces around each ignored."""
    names = split_names(value) if isinstance(value, str) else [str(n) for n in value]
    features = tuple(c.strip() for c in names if c.strip())
    if not features:
        raise ConfigError(f"{option}: no column names given")
    return features


def split_names(text: str) -> list[str]:
    """A comma-separated list of names, where `\\,` is a comma inside a name and `\\\\` a
    backslash (`a,b\\,c` is `a` and `b,c`); any other backslash is itself."""
    names, name = [], ""
    at = 0
    while at < len(text):
        pair = text[at : at + 2]
        if pair in (ESCAPE + ",", ESCAPE + ESCAPE):
            name, at = name + pair[1], at + 2
            continue
        if text[at] == ",":
            names.append(name)
            name = ""
        else:
            name += text[at]
        at += 1
    return [*names, name]


def party_features(
    values: list[str] | None, tables: int, option: str = "--features"
) -> dict[int, tuple[str, ...]]:
    """`vfl simulate --features BLOCK:COLUMNS` (repeated; so --ignore-columns and
    --categorical): block -> the columns of its --data table (the k-th table is block k); a
    block not named keeps all but the ID and label. The columns are given as vfl-client's
    option gives them."""
    out: dict[int, tuple[str, ...]] = {}
    for value in values or []:
        block, sep, columns = str(value).partition(":")
        if not sep or not block.strip().isdigit():
            raise ConfigError(
                f"{option} {value!r}: give BLOCK:COLUMNS, e.g. 1:age,city (block k is the "
                "k-th --data table, from 0)"
            )
        k = int(block)
        if k >= tables:
            raise ConfigError(
                f"{option} {value!r}: block {k} out of range ({tables} --data tables: "
                f"0..{tables - 1})"
            )
        if k in out:
            raise ConfigError(f"{option}: block {k} is given twice")
        out[k] = feature_names(columns, f"{option} {value!r}")
    return out


def refuse_table_options(
    path: Path, columns: TableColumns, encoding: TableEncoding, **given: object
) -> None:
    """Table options given with a party directory would be silently ignored: refuse them.
    (--max-onehot always has a value, so a given one cannot be told from its default.)"""
    options = {
        **dataclasses.asdict(columns),
        **given,
        "num_classes": encoding.num_classes,
        "task": encoding.task,  # a directory's meta.json names its task
    }
    for name, value in options.items():
        if value is not None:
            option = "--" + name.replace("_", "-")
            raise ConfigError(f"{option} applies to a CSV/Parquet --data, not the directory {path}")
