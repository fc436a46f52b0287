"""`vfl-client`: one party of the federation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vfl_cli import table_options as tables
from vfl_cli.errors import setup_logging, user_errors
from vfl_cli.option_groups import with_option_groups
from vfl_client.runner import ClientConfig, run_client
from vfl_core.table_files import is_table_file

Opt = typer.Option


@user_errors
@with_option_groups
def client(
    data: Annotated[
        Path,
        Opt(help="this party's directory (written by `vfl prepare`) or its own CSV/Parquet file"),
    ],
    coordinator: Annotated[str, Opt(help="coordinator host:port")] = "localhost:50051",
    block: Annotated[
        int | None, Opt(help="block index (checked against a directory; required for a table)")
    ] = None,
    table_columns: tables.TableColumns = tables.TableColumns(),
    test_data: Annotated[
        Path | None, Opt(help="table: the test rows (default: split --data by ID)")
    ] = None,
    test_fraction: tables.TestFraction = tables.DEFAULTS["test_fraction"],
    table_encoding: tables.TableEncoding = tables.TableEncoding(),
    party_id: Annotated[str | None, Opt(help="party name (default party<block>)")] = None,
    listen: Annotated[str, Opt(help="host:port to serve on (port 0: any free port)")] = "0.0.0.0:0",
    advertise: Annotated[str | None, Opt(help="host:port the coordinator calls back")] = None,
    device: Annotated[str, Opt(help="auto | cpu | cuda[:N]")] = "auto",
    secret: Annotated[
        str, Opt(envvar="VFL_SECRET", help="federation secret for ID hashing")
    ] = "vfl-demo-secret",
    threads: Annotated[int, Opt(help="torch CPU threads")] = 1,
    register_timeout: Annotated[float, Opt(help="seconds to keep trying to register")] = 300.0,
    checkpoint_dir: Annotated[
        Path | None,
        Opt(
            help="keep the party's state here: <party id>-round-<r>.pt when the coordinator asks "
            "(a restarted client resumes from them) and <party id>.pt when the run ends"
        ),
    ] = None,
    tls_dir: Annotated[
        Path | None,
        Opt(envvar="VFL_TLS_DIR", help="`vfl certs` directory (or this party's part of it)"),
    ] = Path("certs"),
    token_file: Annotated[
        Path | None, Opt(help="this party's token (default: its directory's `token`)")
    ] = None,
    insecure: Annotated[
        bool, Opt(help="plaintext gRPC, no certificates (trusted networks and demos only)")
    ] = False,
    alignment: Annotated[
        str, Opt(help="psi (never send ID hashes) | hmac (as the coordinator's --alignment)")
    ] = "psi",
    log_level: Annotated[str, Opt()] = "info",
) -> None:
    """Serve one party's block to the federation until the coordinator ends the run."""
    setup_logging(log_level)
    table = None
    if is_table_file(data):
        table = tables.table_source(
            data,
            table_columns,
            table_encoding,
            test_path=test_data,
            test_fraction=test_fraction,
            block=block,
        )
    else:
        tables.refuse_table_options(data, table_columns, table_encoding, test_data=test_data)
    config = ClientConfig(
        data=data,
        table=table,
        coordinator=coordinator,
        block=block,
        party_id=party_id,
        listen=listen,
        advertise=advertise,
        device=device,
        secret=secret,
        threads=threads,
        register_timeout_s=register_timeout,
        checkpoint_dir=checkpoint_dir,
        tls_dir=tls_dir,
        token_file=token_file,
        insecure=insecure,
        alignment=alignment,
    )
    reason = run_client(config)
    typer.echo(f"client stopped: {reason}", err=True)


def main() -> None:
    typer.run(client)
