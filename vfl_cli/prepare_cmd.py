"""`vfl prepare`: write one directory per party from a data set, with simulated missing blocks,
or (with --data) one party's directory from its own table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar, cast, get_args

import typer

from vfl_cli import table_options as tables
from vfl_cli.option_groups import with_option_groups
from vfl_core.errors import ConfigError

# numpy and torch: imported where the data are cut, not for --help
if TYPE_CHECKING:
    from vfl_core.data.missingness import Mechanism
    from vfl_core.data.party_dir import PartyData
    from vfl_core.data.preprocess import TabularPreprocessor
    from vfl_core.data.tabular import TableSource

T = TypeVar("T", int, float)
DATASET_CLIENTS = 4  # K of a data set cut without --clients


@with_option_groups
def prepare(
    out: Annotated[Path, typer.Option("--out", help="Directory for the party directories.")],
    dataset: Annotated[
        str, typer.Option(help="digits, diabetes (regression), mnist or credit.")
    ] = "digits",
    data_path: Annotated[
        Path | None,
        typer.Option(help="Source files: the MNIST IDX directory or the credit CSV (or its dir)."),
    ] = None,
    clients: Annotated[
        int | None,
        typer.Option(
            help="Number of parties K (feature blocks); required for a table.",
            show_default="4 for a data set",
        ),
    ] = None,
    p_miss: Annotated[
        float, typer.Option(help="Probability a party misses a training sample.")
    ] = 0.0,
    p_miss_test: Annotated[
        float | None,
        typer.Option(help="Same for test samples.", show_default="the training probabilities"),
    ] = None,
    p_miss_per_party: Annotated[
        str | None, typer.Option(help='Per-party training probabilities, e.g. "0.1,0.2,0,0.5".')
    ] = None,
    nonuniform: Annotated[
        bool, typer.Option(help="Draw each party's probability from Beta(2,2) (paper).")
    ] = False,
    missing: Annotated[
        str | None,
        typer.Option(
            help="Training missingness mechanism instead of --p-miss: mcar:P, mnar:P (drop "
            "with P if the block's mean feature is negative, else 1-P), mar1, mar2[:B] (the "
            "DLVM paper's Algorithms 2 and 3), mar1-anchor[:P], mar2-anchor[:P]."
        ),
    ] = None,
    missing_test: Annotated[
        str | None,
        typer.Option(help="Same for the test split.", show_default="the training missingness"),
    ] = None,
    labels: Annotated[
        int | None,
        typer.Option(
            help="Keep the labels of only N training samples (the rest unlabelled).",
            show_default="all",
        ),
    ] = None,
    test_fraction: Annotated[float, typer.Option(help="Share of samples in the test split.")] = 0.2,
    seed: Annotated[int, typer.Option(help="One seed fixes split, missingness, p_miss.")] = 0,
    layout: Annotated[
        str, typer.Option(help="auto, quadrants, strips (images) or columns (tabular).")
    ] = "auto",
    prefix: Annotated[str, typer.Option(help="Party directory name prefix.")] = "party",
    label_blocks: Annotated[
        str | None, typer.Option(help='Blocks holding labels, e.g. "0,1".', show_default="all")
    ] = None,
    keep_labels: Annotated[
        bool,
        typer.Option(help="Label parties keep the labels of samples whose block they miss."),
    ] = False,
    columns: Annotated[int, typer.Option(help="Credit: keep the first N feature columns.")] = 20,
    data: Annotated[
        Path | None,
        typer.Option(help="One party's own CSV/Parquet table: --out becomes its directory."),
    ] = None,
    test_data: Annotated[
        Path | None, typer.Option(help="Table: its test rows.", show_default="split by ID hash")
    ] = None,
    table_columns: tables.TableColumns = tables.TableColumns(),
    block: Annotated[int | None, typer.Option(help="Table: this party's block index.")] = None,
    table_encoding: tables.TableEncoding = tables.TableEncoding(),
    preprocessing: Annotated[
        Path | None,
        typer.Option(help="Table: reuse this fitted preprocess.json instead of fitting one."),
    ] = None,
) -> None:
    """Cut a data set into K party directories (features, IDs, labels) with missing blocks.

    With --data: turn one party's own table into its party directory, with the preprocessing
    fitted on its training rows (or reused from --preprocessing) in preprocess.json."""
    from vfl_core.data.datasets import Layout, load_dataset
    from vfl_core.data.prepare import party_p_miss, prepare_parties, seeded_rng

    if data is not None:
        source = tables.table_source(
            data,
            table_columns,
            table_encoding,
            test_path=test_data,
            test_fraction=test_fraction,
            block=block,
            clients=clients,
        )
        prepare_table(source, out, preprocessing)
        return
    if table_encoding.task is not None:
        raise ConfigError("--task applies to --data (a built-in data set has its own task)")
    if layout not in get_args(Layout):
        raise ConfigError(f"unknown layout {layout!r} (use {', '.join(get_args(Layout))})")
    clients = DATASET_CLIENTS if clients is None else clients
    per_party = _parse_list(p_miss_per_party, float, "--p-miss-per-party")
    rng = seeded_rng(seed, "p_miss")
    train_p = party_p_miss(clients, p_miss, per_party, nonuniform, rng)
    # Without --p-miss-test the test split sees the same per-party probabilities as training.
    test_p = (
        train_p if p_miss_test is None else party_p_miss(clients, p_miss_test, None, False, rng)
    )
    mechanisms = _mechanisms(missing, missing_test, p_miss_per_party is not None or nonuniform)
    dataset_data = load_dataset(dataset, data_path, columns=columns)
    paths = prepare_parties(
        dataset_data,
        out,
        num_blocks=clients,
        p_miss_train=train_p,
        p_miss_test=test_p,
        test_fraction=test_fraction,
        seed=seed,
        layout=cast(Layout, layout),
        prefix=prefix,
        label_blocks=_parse_list(label_blocks, int, "--label-blocks"),
        mechanisms=mechanisms,
        labels=labels,
        keep_labels=keep_labels,
    )
    _echo_summary(out, paths)


def _mechanisms(
    missing: str | None, missing_test: str | None, per_party: bool
) -> dict[str, Mechanism]:
    """The --missing/--missing-test mechanisms by split; the test split follows training
    unless told otherwise (as the MCAR probabilities do)."""
    from vfl_core.data.missingness import parse_mechanism

    if missing is not None and per_party:
        raise ConfigError("give --missing or --p-miss-per-party/--nonuniform, not both")
    chosen: dict[str, Mechanism] = {}
    if missing is not None:
        chosen["train"] = chosen["test"] = parse_mechanism(missing)
    if missing_test is not None:
        chosen["test"] = parse_mechanism(missing_test)
    return chosen


def prepare_table(source: TableSource, out: Path, preprocessing: Path | None) -> None:
    from vfl_core.data.party_dir import save_party_dir
    from vfl_core.data.tabular import load_table_party, read_fitted

    fitted = read_fitted(preprocessing, source.task) if preprocessing is not None else None
    data, fitted = load_table_party(source, fitted)
    save_party_dir(out, data)
    _echo_table_summary(out, data, fitted)


def _echo_table_summary(out: Path, data: PartyData, fitted: TabularPreprocessor) -> None:
    from vfl_core.data.label_summary import class_counts, describe_classes, rare_class_warnings

    rows = ", ".join(f"{name} {len(split)}" for name, split in data.splits.items())
    typer.echo(f"block {data.meta.block} of {data.meta.num_blocks}: {rows} rows")
    for spec in fitted.columns:
        detail = f" ({len(spec.categories)} categories)" if spec.categories else ""
        detail = " (dates, in days since 1970-01-01)" if spec.dates else detail
        missing = ", missing indicator" if spec.indicator else ""
        typer.echo(f"  {spec.name}: {spec.kind}{detail}{missing}")
    for warning in data.warnings:  # numbers that look like codes
        typer.echo(f"warning: {warning}", err=True)
    if fitted.task == "regression" and fitted.label_column is not None:
        typer.echo(f"  regression targets from {fitted.label_column!r}")
    if fitted.classes:
        mapping = ", ".join(f"{i}={label}" for i, label in enumerate(fitted.classes))
        typer.echo(f"  labels from {fitted.label_column!r}: {mapping}")
        counts = class_counts(data)
        typer.echo(f"  {describe_classes(counts)}")
        for warning in rare_class_warnings(counts):
            typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"{data.meta.feature_shape[0]} features per row; wrote {out}")


def _parse_list(text: str | None, convert: type[T], option: str) -> list[T] | None:
    """Parse a comma-separated option value; None stays None (the option's default)."""
    if text is None:
        return None
    try:
        return [convert(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise ConfigError(f"{option}: cannot parse {text!r} ({exc})") from exc


def _echo_summary(out: Path, paths: list[Path]) -> None:
    """Rows per party per split, read back from prepare.json (the record of this run)."""
    from vfl_core.data.prepare import PREPARE_FILE

    summary = json.loads((out / PREPARE_FILE).read_text())
    counts = summary["counts"]
    splits = list(counts)
    labelled = set(summary["label_blocks"])
    typer.echo(f"{'party':<16} {'block':>5} {'labels':>6} " + " ".join(f"{s:>7}" for s in splits))
    for k, path in enumerate(paths):
        rows = " ".join(f"{counts[s]['per_party'][k]:>7}" for s in splits)
        typer.echo(f"{path.name:<16} {k:>5} {'yes' if k in labelled else 'no':>6} {rows}")
    if summary.get("keep_labels"):
        only = " ".join(f"{sum(counts[s]['label_only_per_party']):>7}" for s in splits)
        typer.echo(f"{'(label-only rows)':<16} {'':>5} {'':>6} {only}")
    dropped = " ".join(f"{counts[s]['dropped_no_party']:>7}" for s in splits)
    typer.echo(f"{'(held by nobody)':<16} {'':>5} {'':>6} {dropped}")
    if "labelled" in counts.get("train", {}):
        typer.echo(f"{'(labelled)':<16} {'':>5} {'':>6} {counts['train']['labelled']:>7}")
    p_train = ", ".join(f"{p:.3f}" for p in summary["p_miss_train"])
    missing = summary["missing"]
    typer.echo(
        f"p_miss train [{p_train}]; missing train {missing['train']}, test {missing['test']};"
        f" wrote {out}/{PREPARE_FILE}"
    )
