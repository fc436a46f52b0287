"""`vfl bench wan`: the federation over shaped links (benchmarks/wan/), and with --tables a
table's model over them (benchmarks/wan/tables.py). Registered on `bench_app` by importing this
module (vfl_cli.app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vfl_cli.bench_cmd import bench_app
from vfl_cli.bench_options import (
    DEFAULT_DATA,
    BenchRun,
    Opt,
    bench_module,
    command_line,
    parse_floats,
    parse_ints,
    parse_variants,
)
from vfl_cli.errors import setup_logging, user_errors
from vfl_cli.option_groups import with_option_groups
from vfl_core.errors import ConfigError


@bench_app.command("wan")
@user_errors
@with_option_groups
def wan(
    label: Annotated[str, Opt(help="names this invocation's results: wan-LABEL.json")] = "default",
    workloads: Annotated[str, Opt(help="mnist-mlp, mnist-cnn, credit-mlp")] = (
        "mnist-mlp,mnist-cnn,credit-mlp"
    ),
    variants: Annotated[
        str, Opt(help="named sets of coordinator options (benchmarks/wan/__init__.py)")
    ] = ("default"),
    rtts: Annotated[str, Opt("--rtts", help="round-trip times in ms")] = "0,10,50,100",
    bandwidths: Annotated[
        str, Opt(help="link bandwidths in Mbit/s (default 1000,100; 100 with --tables)")
    ] = "",
    jitter: Annotated[float, Opt(help="jitter in ms (uniform +- per chunk, each way)")] = 0.0,
    epochs: Annotated[int, Opt(help="epochs per run")] = 3,
    warmup: Annotated[int, Opt(help="untimed epochs per run")] = 1,
    seed: Annotated[int, Opt(help="seeds data, model and faults")] = 0,
    data_path: Annotated[Path, Opt(help="directory with the shared data files")] = DEFAULT_DATA,
    tables: Annotated[
        str, Opt(help="credit,census_like: train these tables to a model instead (K = 3)")
    ] = "",
    recipes: Annotated[str, Opt(help="with --tables: benchmarks/wan/tables.py RECIPES")] = (
        "defaults,direct,local4,local4-direct,split-nn"
    ),
    seeds: Annotated[str, Opt(help="with --tables: seeds")] = "0",
    max_minutes: Annotated[
        float, Opt(help="with --tables: start no run after this many minutes (0: no limit)")
    ] = 0.0,
    bench: BenchRun = BenchRun(),
) -> None:
    """Epoch time and accuracy over shaped links (RTT, bandwidth, jitter), K = 4; or, with
    --tables, rounds, time and scores of a table's model (K = 3); wan.md."""
    setup_logging(bench.log_level)
    mod = bench_module("wan")
    if tables:
        if not label.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"--label must be letters, digits, - and _, got {label!r}")
        _wan_tables(
            label, tables, recipes, seeds, rtts, bandwidths or "100", max_minutes, data_path, bench
        )
        path, text = mod.write_report(bench.results)
        typer.echo(text)
        typer.echo(f"report written to {path}")
        return
    bandwidths = bandwidths or "1000,100"
    chosen = parse_variants(workloads, tuple(mod.WORKLOADS), "workload(s)")
    variant_names = parse_variants(variants, tuple(mod.VARIANTS), "variant(s)")
    if not 0 <= warmup < epochs:
        raise ConfigError(f"--warmup must be below --epochs ({epochs}), got {warmup}")
    if not label.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"--label must be letters, digits, - and _, got {label!r}")
    mbits = parse_floats(bandwidths, "--bandwidths")
    if not mbits or any(b <= 0 for b in mbits) or any(r < 0 for r in parse_floats(rtts, "--rtts")):
        raise ConfigError("--bandwidths must be positive and --rtts non-negative")
    job = mod.WanJob(
        results=bench.results,
        data_path=data_path.resolve(),
        label=label,
        workloads=chosen,
        variants=variant_names,
        rtts_ms=parse_floats(rtts, "--rtts"),
        mbits=mbits,
        jitter_ms=jitter,
        epochs=epochs,
        warmup=warmup,
        seed=seed,
        command=command_line(),
    )
    if not bench.report_only:
        mod.run(job, progress=bench.progress)
    path, text = mod.write_report(bench.results)
    typer.echo(text)
    typer.echo(f"report written to {path}")


def _wan_tables(
    label: str,
    names: str,
    recipes: str,
    seeds: str,
    rtts: str,
    bandwidth: str,
    max_minutes: float,
    data_path: Path,
    bench: BenchRun,
) -> None:
    mod = bench_module("wan.tables")
    chosen = parse_variants(names, mod.TABLES, "table(s)")
    found = bench_module("tabular.tables").tables(data_path, quick=False)
    if missing := [t for t in chosen if t not in found]:
        raise ConfigError(f"no data for table(s) {missing} under --data-path {data_path}")
    mbit = parse_floats(bandwidth, "--bandwidths")
    rtt_ms = parse_floats(rtts, "--rtts")
    if len(mbit) != 1 or mbit[0] <= 0 or any(r < 0 for r in rtt_ms):
        raise ConfigError("with --tables: one positive --bandwidths and non-negative --rtts")
    job = mod.TablesJob(
        results=bench.results,
        data_path=data_path.resolve(),
        label=label,
        tables=chosen,
        recipes=parse_variants(recipes, tuple(mod.RECIPES), "recipe(s)"),
        rtts_ms=rtt_ms,
        mbit=mbit[0],
        seeds=parse_ints(seeds, "--seeds"),
        max_minutes=max_minutes,
        command=command_line(),
    )
    if not bench.report_only:
        mod.run(job, progress=bench.progress)
