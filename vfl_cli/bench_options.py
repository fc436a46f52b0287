"""What the `vfl bench` commands share: their common options (where results go, whether to run,
progress and logging; the option-sweep runs), parsing of comma-separated sweeps into checked
values, and running a benchmark's job then writing its report."""

from __future__ import annotations

import importlib
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer

from vfl_core.errors import ConfigError

Opt = typer.Option
DEFAULT_RESULTS = Path("benchmarks/results")
DEFAULT_DATA = Path("../shared/data")

# Options every benchmark command shares.
Jobs = Annotated[int, Opt(help="parallel runs (processes); 0 runs in this process")]
Results = Annotated[Path, Opt(help="results directory")]
ReportOnly = Annotated[bool, Opt(help="only rewrite the report from cached runs")]
Progress = Annotated[bool, Opt(help="show a progress bar")]
LogLevel = Annotated[str, Opt(help="debug | info | warning | error")]
MnistPath = Annotated[Path, Opt(help="directory with the MNIST IDX files")]


@dataclass(frozen=True)
class BenchRun:
    """Where a cached benchmark keeps its runs, whether to run them, and how it reports."""

    results: Results = DEFAULT_RESULTS
    report_only: ReportOnly = False
    progress: Progress = True
    log_level: LogLevel = "warning"


def bench_module(module: str) -> ModuleType:
    """Import benchmarks.<module> when its command runs."""
    return importlib.import_module(f"benchmarks.{module}")


def parse_floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated numbers, got {text!r}") from None


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None


def parse_methods(text: str) -> tuple[str, ...]:
    from vfl_core.methods.registry import METHODS

    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ConfigError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    return methods


def parse_variants(text: str, known: tuple[str, ...], what: str = "method(s)") -> tuple[str, ...]:
    chosen = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in chosen if m not in known]
    if unknown or not chosen:
        raise ConfigError(f"unknown {what} {unknown}; choose from {', '.join(known)}")
    return chosen


def rejoin_rates(fail_rate: float, rejoin: tuple[float, ...]) -> tuple[float, ...]:
    """The rejoin rates, once they and R_d are checked to be probabilities of a fault model."""
    if not 0 < fail_rate <= 1 or any(not 0 < r <= 1 for r in rejoin):
        raise ConfigError("--fail-rate and the rejoin values must be in (0, 1]")
    return rejoin


def run_and_report(
    run: Callable[..., list[str]],
    write_report: Callable[[Any], tuple[Path, str]],
    job: Any,
    bench: BenchRun,
) -> None:
    """Run the job's missing runs (unless only reporting), then write and print its report."""
    if not bench.report_only:
        failed = run(job, progress=bench.progress)
        if failed:
            typer.echo(f"{len(failed)} runs failed (see the log): {', '.join(failed)}", err=True)
    path, text = write_report(job)
    typer.echo(text)
    typer.echo(f"report written to {path}")


def command_line() -> str:
    return "vfl " + shlex.join(sys.argv[1:]) if sys.argv else "vfl bench"


@dataclass(frozen=True)
class OptionRuns:
    """The accuracy runs of a benchmark that varies one training option (grid setups, LASER-VFL,
    train p_miss 0): on which data sets, seeds and how many processes."""

    datasets: Annotated[str, Opt(help="mnist, credit")] = "mnist,credit"
    seeds: Annotated[str, Opt(help="comma-separated seeds")] = "0,1,2"
    jobs: Jobs = 2
    data_path: Annotated[Path, Opt(help="directory with the shared data files")] = DEFAULT_DATA


def option_job(
    mod: ModuleType, runs: OptionRuns, results: Path, option: str, values: tuple[str, ...]
) -> Any:
    return mod.WireDtypeJob(
        results=results,
        data_path=runs.data_path.resolve(),
        datasets=parse_variants(runs.datasets, ("mnist", "credit"), "data set(s)"),
        values=values,
        seeds=parse_ints(runs.seeds, "--seeds"),
        jobs=runs.jobs,
        command=command_line(),
        option=option,
    )
