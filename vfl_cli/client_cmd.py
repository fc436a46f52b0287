"""`vfl-client`: one party of the federation."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from vfl_cli import defaults
from vfl_cli import table_options as tables
from vfl_cli.command import run
from vfl_cli.errors import EXIT_RUN_NOT_OK, setup_logging, user_errors
from vfl_cli.option_groups import with_option_groups
from vfl_cli.options import from_file, given, read_config_file, refuse_unknown_keys, shown
from vfl_core.errors import ConfigError

if TYPE_CHECKING:
    from vfl_client.runner import ClientConfig

Opt = typer.Option
T = TypeVar("T")

# Serving mode's defaults (vfl_client.serving_runner.ServeConfig; tests/test_serving_cli.py
# checks they agree): the per-request deadline and the batching window, in milliseconds.
SERVE_DEADLINE_MS = 100.0
SERVE_WINDOW_MS = 2.0

# Options named apart from the ClientConfig field they set.
FIELDS = {"register_timeout": "register_timeout_s"}
# The keys of a config file: ClientConfig's fields (`table` is built from the table options)
# and the options that are no field of it.
KEYS = {"data", *defaults.CLIENT, "log_level"} - {"table"}


def D(field: str) -> Any:
    """ClientConfig's default for `field`, shown by its option."""
    return defaults.CLIENT[field]


@user_errors
@with_option_groups
def client(
    ctx: typer.Context,
    data: Annotated[
        Path | None,
        Opt(
            help="this party's directory (written by `vfl prepare`) or its own CSV/Parquet file "
            "(required here or as `data:` in --config)"
        ),
    ] = None,
    config: Annotated[
        Path | None,
        Opt(
            help="YAML/JSON: a key per option (id_column: for --id-column, ...); a flag given "
            "beats its key"
        ),
    ] = None,
    coordinator: Annotated[str, Opt(help="coordinator host:port")] = D("coordinator"),
    block: Annotated[
        int | None, Opt(help="block index (checked against a directory; required for a table)")
    ] = D("block"),
    table_columns: tables.TableColumns = tables.TableColumns(),
    test_data: Annotated[
        Path | None, Opt(help="table: the test rows", show_default="split --data by ID")
    ] = None,
    test_fraction: tables.TestFraction = tables.DEFAULTS["test_fraction"],
    table_encoding: tables.TableEncoding = tables.TableEncoding(),
    clients: tables.Clients = None,
    party_id: Annotated[str | None, Opt(help="party name", show_default="party<block>")] = D(
        "party_id"
    ),
    listen: Annotated[
        str,
        Opt(
            help="host:port to serve on (port 0: any free port); auto: 127.0.0.1:0 with a "
            "coordinator on this host, else 0.0.0.0:0"
        ),
    ] = D("listen"),
    advertise: Annotated[
        str | None,
        Opt(
            help="host:port the coordinator calls back",
            show_default="a loopback --listen as it is, else the host as the coordinator sees it",
        ),
    ] = D("advertise"),
    device: Annotated[str, Opt(help="auto | cpu | cuda[:N]")] = D("device"),
    secret: Annotated[str, Opt(envvar="VFL_SECRET", help="federation secret for ID hashing")] = D(
        "secret"
    ),
    threads: Annotated[int, Opt(help="torch CPU threads")] = D("threads"),
    register_timeout: Annotated[float, Opt(help="seconds to keep trying to register")] = D(
        "register_timeout_s"
    ),
    checkpoint_dir: Annotated[
        Path | None,
        Opt(
            help="keep the party's state here: <party id>-round-<r>.pt when the coordinator asks "
            "(a restarted client resumes from them) and <party id>.pt when the run ends"
        ),
    ] = D("checkpoint_dir"),
    tls_dir: Annotated[
        Path | None,
        Opt(envvar="VFL_TLS_DIR", help="`vfl certs` directory (or this party's part of it)"),
    ] = D("tls_dir"),
    token_file: Annotated[
        Path | None, Opt(help="this party's token", show_default="<tls-dir>/<party id>/token")
    ] = D("token_file"),
    insecure: Annotated[
        bool, Opt(help="plaintext gRPC, no certificates (trusted networks and demos only)")
    ] = D("insecure"),
    alignment: Annotated[
        str, Opt(help="psi (never send ID hashes) | hmac (as the coordinator's --alignment)")
    ] = D("alignment"),
    bundle_dir: Annotated[
        Path | None,
        Opt(
            help="write the party's serving bundle here when training ends (docs/serving.md)",
            show_default="none written",
        ),
    ] = D("bundle_dir"),
    private_tower_seed: Annotated[
        int | None,
        Opt(
            help="the seed of this party's orthogonal tower when the run sets "
            "--privacy-feature-tower orthogonal: keep it as this organisation's own config, "
            "never share it (docs/security.md)",
            show_default="none",
        ),
    ] = D("private_tower_seed"),
    serve_bundle: Annotated[
        Path | None,
        Opt(
            help="serving mode: answer online requests from this bundle, with --data the "
            "party's CSV/Parquet table keyed by --id-column (no coordinator)",
            show_default="train",
        ),
    ] = None,
    lookup: Annotated[
        str | None,
        Opt(
            help="serving mode: the party's rows from this function, module:function (keyed "
            "IDs -> a row {column: cell} or None each), in place of --data",
            show_default="--data",
        ),
    ] = None,
    peer: Annotated[
        list[str] | None,
        Opt(
            help="serving mode, label party: another serving party, BLOCK[:NAME]=HOST:PORT "
            "(repeat); makes this party the gateway",
            show_default="none",
        ),
    ] = None,
    embed_for: Annotated[
        list[str] | None,
        Opt(
            help="serving mode: a party whose gateway may ask this party's embeddings (repeat); "
            "give it to a label party asked by another label party's gateway",
            show_default="a label party: none; a feature party: any party",
        ),
    ] = None,
    http: Annotated[
        str | None,
        Opt(help="serving mode, gateway: JSON over HTTP on host:port (curl)", show_default="off"),
    ] = None,
    http_auth: Annotated[
        str,
        Opt(
            help="serving mode, gateway: who may ask --http for predictions: mtls (a "
            "certificate of --http-client), token (Authorization: Bearer), none, or auto: none "
            "on a loopback address, else mtls (docs/serving.md)",
        ),
    ] = "auto",
    http_token_file: Annotated[
        Path | None,
        Opt(
            help="serving mode, --http-auth token: the accepted bearer tokens, one a line",
            show_default="the digests of <tls-dir>/<party>/http-tokens.json (vfl certs)",
        ),
    ] = None,
    http_client: Annotated[
        list[str] | None,
        Opt(
            help="serving mode, --http-auth mtls: a certificate name allowed to ask (repeat)",
            show_default="operator",
        ),
    ] = None,
    deadline_ms: Annotated[
        float,
        Opt(
            help="serving mode: a request's default deadline", show_default=shown(SERVE_DEADLINE_MS)
        ),
    ] = SERVE_DEADLINE_MS,
    batch_window_ms: Annotated[
        float,
        Opt(
            help="serving mode: requests to a peer within this window go as one call (0: none)",
            show_default=shown(SERVE_WINDOW_MS),
        ),
    ] = SERVE_WINDOW_MS,
    log_level: Annotated[str, Opt(help="debug | info | warning | error")] = "info",
) -> None:
    """Serve one party's block to the federation until the coordinator ends the run (or, with
    --serve-bundle, answer online prediction requests)."""
    if serve_bundle is not None:
        if config is not None:
            raise ConfigError("--config is for training; serving mode takes its options as flags")
        setup_logging(log_level)
        reason = run_serving_mode(
            {
                "bundle": serve_bundle,
                "features": data,
                "lookup": lookup,
                "id_column": table_columns.id_column,
                "party_id": party_id,
                "listen": "127.0.0.1:0" if listen == "auto" else listen,
                "http": http,
                "http_auth": http_auth,
                "http_token_file": http_token_file,
                "http_clients": tuple(http_client or ("operator",)),
                "peers": tuple(peer or ()),
                "embed_for": None if embed_for is None else tuple(embed_for),
                "deadline_ms": deadline_ms,
                "batch_window_ms": batch_window_ms,
                "secret": secret,
                "device": "cpu" if device == "auto" else device,
                "threads": threads,
                "tls_dir": tls_dir,
                "insecure": insecure,
                "token_file": token_file,
            }
        )
        typer.echo(f"client stopped: {reason}", err=True)
        return
    if peer or http or http_token_file or http_client or http_auth != "auto":
        raise ConfigError("--peer and --http* are for serving mode: give --serve-bundle")
    if embed_for:
        raise ConfigError("--embed-for is for serving mode: give --serve-bundle")
    if lookup:
        raise ConfigError("--lookup is for serving mode: give --serve-bundle")
    settings = read_config_file(config)
    if "table" in settings:
        raise ConfigError("--config: a table party takes the table options, not a `table:` key")
    table = {
        **dataclasses.asdict(table_columns),
        **dataclasses.asdict(table_encoding),
        "test_data": test_data,
        "test_fraction": test_fraction,
        "clients": clients,
    }
    refuse_unknown_keys(config, settings, KEYS | set(table))
    setup_logging(from_file(ctx, settings, {"log_level": log_level})["log_level"])
    table = from_file(ctx, settings, table)
    flags = given(
        ctx,
        {
            "data": data,
            "coordinator": coordinator,
            "block": block,
            "party_id": party_id,
            "listen": listen,
            "advertise": advertise,
            "device": device,
            "secret": secret,
            "threads": threads,
            "register_timeout": register_timeout,
            "checkpoint_dir": checkpoint_dir,
            "tls_dir": tls_dir,
            "token_file": token_file,
            "insecure": insecure,
            "alignment": alignment,
            "bundle_dir": bundle_dir,
            "private_tower_seed": private_tower_seed,
        },
        FIELDS,
    )
    settings.update(flags)
    if settings.get("data") is None:
        raise ConfigError("no party data: give --data (or `data:` in --config)")
    from vfl_client.runner import ClientConfig  # torch and grpc: not for --help

    _describe_table(settings, table)
    reason = run_client(ClientConfig.model_validate(settings))
    typer.echo(f"client stopped: {reason}", err=True)
    if reason in ("run failed", "run interrupted"):  # the coordinator's word for its run
        raise typer.Exit(EXIT_RUN_NOT_OK)


def run_client(config: ClientConfig) -> str:
    """vfl_client.runner.run_client, imported when a client starts (torch, grpc), not for --help."""
    from vfl_client import runner

    return runner.run_client(config)


def run_serving_mode(settings: dict[str, Any]) -> str:
    """vfl_client.serving_runner.run_serving, imported only in serving mode (torch, grpc)."""
    from vfl_client.serving_runner import ServeConfig, run_serving

    return run_serving(ServeConfig.model_validate(settings))


def _describe_table(settings: dict[str, Any], table: dict[str, Any]) -> None:
    """`settings["table"]` from the table options when --data is a CSV/Parquet file; with a
    party directory, table options given are refused (they would be ignored)."""
    from vfl_core.data.table_files import is_table_file

    path = Path(settings["data"])
    columns = _group(tables.TableColumns, table)
    encoding = _group(tables.TableEncoding, table)
    test_path = None if table["test_data"] is None else Path(table["test_data"])
    if not is_table_file(path):
        tables.refuse_table_options(
            path, columns, encoding, test_data=test_path, clients=table["clients"]
        )
        return
    settings["table"] = tables.table_source(
        path,
        columns,
        encoding,
        test_path=test_path,
        test_fraction=table["test_fraction"],
        block=settings.get("block"),
        clients=table["clients"],
    )


def _group(group: type[T], values: dict[str, Any]) -> T:
    """An option group (a dataclass) of the fields of `values`."""
    return group(**{f.name: values[f.name] for f in dataclasses.fields(group)})  # type: ignore[arg-type]


def main() -> None:
    run(client)


if __name__ == "__main__":  # `python -m vfl_cli.<this module>`, as `vfl demo` starts it
    main()
