"""`vfl bench`: the benchmark suites (paper, scale, dvfl, dlvm: vfl_cli.bench_suites; wan:
vfl_cli.bench_wan; privacy: vfl_cli.bench_privacy; tabular, serve and staleness here).

The commands are thin: the work is in the `benchmarks` package (installed with the project;
imported only when a benchmark runs, since it pulls in its own dependencies).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vfl_cli.bench_options import (
    DEFAULT_DATA,
    DEFAULT_RESULTS,
    BenchRun,
    Jobs,
    LogLevel,
    Opt,
    OptionRuns,
    Results,
    bench_module,
    command_line,
    option_job,
    parse_floats,
    parse_ints,
    parse_variants,
    run_and_report,
)
from vfl_cli.errors import setup_logging, user_errors
from vfl_cli.option_groups import with_option_groups
from vfl_core.errors import ConfigError

bench_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Benchmark suites: paper, scale, tabular, wan, serve, privacy, dvfl, dlvm.",
)


@bench_app.command("tabular")
@user_errors
@with_option_groups
def tabular(
    tables: Annotated[
        str | None, Opt(help="comma-separated tables", show_default="all of them")
    ] = None,
    seeds: Annotated[str, Opt(help="comma-separated seeds")] = "0,1,2",
    grpc_seeds: Annotated[str, Opt(help="seeds whose federation also runs over gRPC")] = "0,1,2",
    quick: Annotated[
        bool, Opt(help="3 small tables, one seed, --epochs 5: a check in about a minute")
    ] = (False),
    jobs: Jobs = 0,
    data_path: Annotated[Path, Opt(help="directory with UCI_Credit_Card.csv")] = DEFAULT_DATA,
    bench: BenchRun = BenchRun(),
) -> None:
    """The defaults on tables nobody tuned for: the federation against each party alone,
    logistic/ridge, HistGradientBoosting and a central MLP; writes tabular.md."""
    setup_logging(bench.log_level)
    mod, report = bench_module("tabular"), bench_module("tabular.report")
    known = mod.available_tables(data_path.resolve(), quick)
    chosen = parse_variants(tables, known, "table(s)") if tables else known
    chosen_seeds = parse_ints(seeds, "--seeds")
    job = mod.TabularJob(
        tables=chosen,
        seeds=chosen_seeds[:1] if quick else chosen_seeds,
        grpc_seeds=parse_ints(grpc_seeds, "--grpc-seeds"),
        results=bench.results,
        data_path=data_path.resolve(),
        quick=quick,
        jobs=jobs,
        command=command_line(),
    )
    run_and_report(mod.run, report.write_report, job, bench)


@bench_app.command("staleness")
@user_errors
@with_option_groups
def staleness(
    values: Annotated[str, Opt(help="staleness values; the first is the reference")] = "0,3,7,15",
    runs: OptionRuns = OptionRuns(),
    bench: BenchRun = BenchRun(),
) -> None:
    """Accuracy cost of --staleness over seeds (the grid's setups); a section of wan.md."""
    setup_logging(bench.log_level)
    mod, wan_mod = bench_module("wire_dtype"), bench_module("wan")
    chosen = parse_ints(values, "--values")
    if not chosen or min(chosen) < 0:
        raise ConfigError("--values must be non-negative integers")
    job = option_job(mod, runs, bench.results, "staleness", tuple(str(v) for v in chosen))
    run_and_report(mod.run, lambda _job: wan_mod.write_report(bench.results), job, bench)


@bench_app.command("serve")
@user_errors
def serve(
    callers: Annotated[str, Opt(help="concurrent callers per cell")] = "1,8,64",
    rtts: Annotated[str, Opt("--rtts", help="gateway-party round-trip times in ms")] = "0,10,50",
    modes: Annotated[str, Opt(help="up, kill (SIGKILL a party), stop (SIGSTOP a party)")] = (
        "up,kill,stop"
    ),
    seconds: Annotated[float, Opt(help="seconds per cell")] = 3.0,
    deadline_ms: Annotated[float, Opt(help="the gateway's request deadline")] = 100.0,
    batch_window_ms: Annotated[float, Opt(help="the gateway's batching window")] = 2.0,
    device: Annotated[str, Opt(help="the serving parties' device: cpu | cuda[:N]")] = "cpu",
    caller_processes: Annotated[
        int,
        Opt(
            min=1,
            help="spread the callers over this many processes (1: threads of the benchmark, "
            "whose own interpreter lock then bounds 64 callers)",
        ),
    ] = 4,
    gateways: Annotated[
        str,
        Opt(
            help="also measure throughput with this many gateway processes side by side, e.g. "
            "1,2,4 (each its own port, the callers spread over them; every party up, RTT 0)",
            show_default="not measured",
        ),
    ] = "",
    scale_rounds: Annotated[
        int, Opt(min=1, help="--gateways: rounds of the counts, alternating their order")
    ] = 2,
    stamps: Annotated[
        str,
        Opt(
            help="the callers stamp their own deadline on each request (X-Deadline-At): "
            "stamped, unstamped, or both (a cell each)"
        ),
    ] = "stamped",
    retry_after: Annotated[
        str,
        Opt(
            help="a caller shed (429) honours the reply's Retry-After before asking again, or "
            "ignores it and asks at once: honour, ignore, or both (a cell each)"
        ),
    ] = "ignore",
    data_path: Annotated[Path, Opt(help="directory with the shared data files")] = DEFAULT_DATA,
    results: Results = DEFAULT_RESULTS,
    log_level: LogLevel = "warning",
) -> None:
    """Online serving latency p50/p95/p99 and throughput (Credit, K = 4); writes serve.md."""
    setup_logging(log_level)
    mod = bench_module("serve")
    chosen = parse_variants(modes, ("up", "kill", "stop"), "mode(s)")
    counts = parse_ints(gateways, "--gateways") if gateways.strip() else ()
    if counts and (min(counts) < 1 or 1 not in counts):
        raise ConfigError(f"--gateways {gateways!r}: counts of at least 1, and 1 among them")
    job = mod.ServeJob(
        results=results,
        data_path=data_path.resolve(),
        command=command_line(),
        callers=parse_ints(callers, "--callers"),
        rtts_ms=parse_floats(rtts, "--rtts"),
        modes=chosen,
        seconds=seconds,
        deadline_ms=deadline_ms,
        window_ms=batch_window_ms,
        device=device,
        caller_processes=caller_processes,
        gateways=counts,
        scale_rounds=scale_rounds,
        stamps=tuple(
            s == "stamped" for s in parse_variants(stamps, ("stamped", "unstamped"), "stamp(s)")
        ),
        retries=tuple(
            r == "honour"
            for r in parse_variants(retry_after, ("honour", "ignore"), "--retry-after choice(s)")
        ),
    )
    path, text = mod.write_report(mod.run(job), results)
    typer.echo(text)
    typer.echo(f"report written to {path}")
