"""`vfl export`: a party's serving bundle from its end checkpoint (docs/serving.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vfl_cli import table_options as tables
from vfl_cli.option_groups import with_option_groups

Opt = typer.Option


@with_option_groups
def export(
    checkpoint: Annotated[
        Path, Opt(help="the party's <party id>.pt (vfl-client --checkpoint-dir)")
    ],
    data: Annotated[
        Path, Opt(help="the party's directory or its own CSV/Parquet file, as it trained on")
    ],
    out: Annotated[Path, Opt(help="the bundle directory to write")],
    block: Annotated[int | None, Opt(help="table: the party's block")] = None,
    table_columns: tables.TableColumns = tables.TableColumns(),
    test_fraction: tables.TestFraction = tables.DEFAULTS["test_fraction"],
    table_encoding: tables.TableEncoding = tables.TableEncoding(),
    clients: tables.Clients = None,
    threshold: Annotated[
        float | None,
        Opt(
            help="binary: predict class 1 from this probability (overrides --choice's)",
            show_default="argmax",
        ),
    ] = None,
    choice: Annotated[
        Path | None,
        Opt(
            help="the run's results.json: its validation choice (threshold, subsets) goes in "
            "a label party's bundle, so serving decides as `vfl predict` does",
            show_default="every party, the argmax",
        ),
    ] = None,
) -> None:
    """Write a party's serving bundle (its models, preprocessing and metadata) from its
    checkpoint and data."""
    from vfl_core.data.table_files import is_table_file
    from vfl_core.serving.export import export_bundle, read_choice

    table = None
    if is_table_file(data):
        table = tables.table_source(
            data,
            table_columns,
            table_encoding,
            test_path=None,
            test_fraction=test_fraction,
            block=block,
            clients=clients,
        )
    decided = read_choice(choice) if choice is not None else None
    path = export_bundle(checkpoint, data, out, table, threshold, decided)
    typer.echo(f"serving bundle written to {path}")
