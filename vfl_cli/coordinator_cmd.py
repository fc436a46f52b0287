"""`vfl-coordinator`: registration, alignment, rounds and inference for K parties."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vfl_cli import defaults
from vfl_cli.command import run
from vfl_cli.errors import setup_logging, user_errors
from vfl_cli.fault_options import FaultOptions
from vfl_cli.option_groups import with_option_groups
from vfl_cli.options import (
    from_file,
    given,
    read_config_file,
    refuse_unknown_keys,
    section,
    train_keys,
)
from vfl_cli.train_options import Deadline, TrainOptions

if TYPE_CHECKING:
    from vfl_coordinator.config import CoordinatorConfig

Opt = typer.Option

# Options named apart from the CoordinatorConfig field they set.
FIELDS = {
    "register_timeout": "register_timeout_s",
    "rejoin_timeout": "rejoin_timeout_s",
    "pause_probe": "pause_probe_s",
    "align_retry": "align_retry_s",
    "farewell": "farewell_s",
}


# The keys of a config file: CoordinatorConfig's fields and the options that are no field of it.
KEYS = {*defaults.COORDINATOR, "deadlines", "faults", "train", "progress", "port_file", "log_level"}


def D(field: str) -> Any:
    """CoordinatorConfig's default for `field`, shown by its option."""
    return defaults.COORDINATOR[field]


@user_errors
@with_option_groups
def coordinator(
    ctx: typer.Context,
    clients: Annotated[int, Opt(help="number of parties K to wait for")] = D("clients"),
    listen: Annotated[str, Opt(help="host:port to serve on")] = D("listen"),
    config: Annotated[
        Path | None,
        Opt(
            help="YAML/JSON: CoordinatorConfig's keys (register_timeout_s: for "
            "--register-timeout, ...), `train:`, `faults:` and `deadlines:` maps; a flag given "
            "beats its key"
        ),
    ] = None,
    quorum: Annotated[
        int | None,
        Opt(help="start with this many after --register-timeout", show_default="all --clients"),
    ] = D("quorum"),
    register_timeout: Annotated[float, Opt(help="seconds to wait for registrations")] = D(
        "register_timeout_s"
    ),
    rejoin_timeout: Annotated[
        float,
        Opt(help="seconds training waits for a label party to come back when none is up"),
    ] = D("rejoin_timeout_s"),
    pause_probe: Annotated[
        float,
        Opt(help="seconds between calls to the down parties while training waits for one"),
    ] = D("pause_probe_s"),
    align_retry: Annotated[
        float, Opt(help="seconds alignment keeps asking a party that holds samples but is silent")
    ] = D("align_retry_s"),
    farewell: Annotated[
        float,
        Opt(
            help="seconds after the run for a party that missed its end (down, restarting) to "
            "register again and be told it (0: none)"
        ),
    ] = D("farewell_s"),
    train: TrainOptions = TrainOptions(),
    deadline: Deadline = defaults.DEADLINES["embed"],
    down_after: Annotated[int, Opt(help="missed phases before a party is marked down")] = D(
        "down_after"
    ),
    retry_every: Annotated[int, Opt(help="rounds between retries of a down party")] = D(
        "retry_every"
    ),
    faults: FaultOptions = FaultOptions(),
    out: Annotated[Path, Opt(help="directory for results and round log")] = D("out"),
    serve: Annotated[bool, Opt(help="keep serving predictions after training until stopped")] = D(
        "serve"
    ),
    run_id: Annotated[str | None, Opt(help="names the run", show_default="random")] = D("run_id"),
    progress: Annotated[
        bool, Opt(help="show a progress bar (on a terminal; logs get a line per epoch)")
    ] = True,
    audit_log: Annotated[
        Path | None,
        Opt(
            help="append every message to and from the coordinator to this file",
            show_default="none",
        ),
    ] = D("audit_log"),
    checkpoint_dir: Annotated[
        Path | None,
        Opt(
            help="write checkpoints here; a restart with the same command resumes from them",
            show_default="none",
        ),
    ] = D("checkpoint_dir"),
    checkpoint_every: Annotated[
        int, Opt(help="rounds between checkpoints of every party and the coordinator (0: end)")
    ] = D("checkpoint_every"),
    eval_every: Annotated[
        int, Opt(help="evaluate the test split every N epochs (logged in epochs.jsonl; 0: never)")
    ] = D("eval_every"),
    port_file: Annotated[
        Path | None, Opt(help="write the bound port here once listening (for --listen host:0)")
    ] = None,
    tls_dir: Annotated[
        Path | None,
        Opt(envvar="VFL_TLS_DIR", help="`vfl certs` directory (or its coordinator/ part)"),
    ] = D("tls_dir"),
    insecure: Annotated[
        bool, Opt(help="plaintext gRPC, no certificates or tokens (trusted networks, demos)")
    ] = D("insecure"),
    parties: Annotated[
        str | None,
        Opt(
            help="admitted party ids, e.g. party0,party1 or party0:0,party1:1+2 (id:blocks); "
            "default with TLS: every party with a `vfl certs` token",
            show_default="with TLS: every party with a token; else any",
        ),
    ] = None,
    alignment: Annotated[
        str, Opt(help="psi (private set intersection) | hmac (parties' keyed ID hashes)")
    ] = D("alignment"),
    max_inflight: Annotated[int, Opt(help="calls in flight per peer")] = D("max_inflight"),
    pipeline: Annotated[
        bool, Opt(help="pipelined rounds (same results); --no-pipeline: Embed, Fuse, Backward")
    ] = D("pipeline"),
    log_level: Annotated[str, Opt(help="debug | info | warning | error")] = "info",
) -> None:
    """Coordinate a LASER-VFL federation of `--clients` vfl-client processes."""
    settings = read_config_file(config)
    refuse_unknown_keys(config, settings, KEYS)
    own = {"log_level": log_level, "progress": progress, "port_file": port_file}
    own = from_file(ctx, settings, own)
    setup_logging(own["log_level"])
    from vfl_coordinator.admission import parse_parties  # torch and grpc: not for --help
    from vfl_coordinator.config import CoordinatorConfig

    train_settings = section(config, settings, "train")
    refuse_unknown_keys(config, train_settings, train_keys(), "train")
    train_config = train.config(train_settings)
    flags = given(
        ctx,
        {
            "listen": listen,
            "clients": clients,
            "quorum": quorum,
            "register_timeout": register_timeout,
            "rejoin_timeout": rejoin_timeout,
            "pause_probe": pause_probe,
            "align_retry": align_retry,
            "farewell": farewell,
            "down_after": down_after,
            "retry_every": retry_every,
            "out": out,
            "serve": serve,
            "run_id": run_id,
            "audit_log": audit_log,
            "checkpoint_dir": checkpoint_dir,
            "checkpoint_every": checkpoint_every,
            "eval_every": eval_every,
            "tls_dir": tls_dir,
            "insecure": insecure,
            "alignment": alignment,
            "max_inflight": max_inflight,
            "pipeline": pipeline,
        },
        FIELDS,
    )
    settings.update(flags)
    if given(ctx, {"deadline": deadline}):
        d = deadline  # every phase a party works in; align and shutdown keep theirs
        phases = {"embed": d, "fuse": d, "backward": d, "predict": d, "checkpoint": max(d, 5.0)}
        settings["deadlines"] = {**(settings.get("deadlines") or {}), **phases}
    if given(ctx, {"parties": parties}) and parties is not None:
        settings["parties"] = parse_parties(parties)
    settings["faults"] = faults.over(ctx, settings.get("faults") or {})
    cfg = CoordinatorConfig.model_validate({**settings, "train": train_config.model_dump()})
    port_path = None if own["port_file"] is None else Path(own["port_file"])
    on_port = None if port_path is None else functools.partial(write_port_file, port_path)
    results = run_coordinator(cfg, progress=bool(own["progress"]), on_port=on_port)
    typer.echo(
        f"run {results['run_id']} finished: {results['rounds']} rounds; results in {cfg.out}"
    )


def run_coordinator(config: CoordinatorConfig, **options: Any) -> dict[str, Any]:
    """vfl_coordinator.runner.run_coordinator, imported when a coordinator starts (torch, grpc),
    not for --help."""
    from vfl_coordinator import runner

    return runner.run_coordinator(config, **options)


def write_port_file(path: Path, port: int) -> None:
    """Write the port atomically, so a reader never sees a partial number."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


def main() -> None:
    run(coordinator)


if __name__ == "__main__":  # `python -m vfl_cli.<this module>`, as `vfl demo` starts it
    main()
