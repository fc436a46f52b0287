"""`vfl bench paper`, `vfl bench scale`, `vfl bench dvfl` and `vfl bench dlvm`: the papers'
comparisons on our engine. `paper`: LASER-VFL against the paper's baselines (the accuracy grid
of its Table 1, the samples only feature-only parties hold, party faults, the wire dtypes);
`scale`: time and accuracy against the number of parties (the paper's Figure 2) and training
throughput of both transports; `dvfl` and `dlvm`: the other papers' methods in their setups.

Registered on `bench_app` by importing this module (vfl_cli.app). The work is in the
`benchmarks` package's suites (benchmarks.paper, benchmarks.scale, benchmarks.dvfl,
benchmarks.dlvm), imported only when a benchmark runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from vfl_cli.bench_cmd import bench_app
from vfl_cli.bench_options import (
    DEFAULT_DATA,
    DEFAULT_RESULTS,
    BenchRun,
    Jobs,
    LogLevel,
    MnistPath,
    Opt,
    OptionRuns,
    Results,
    bench_module,
    command_line,
    option_job,
    parse_floats,
    parse_ints,
    parse_methods,
    parse_variants,
    rejoin_rates,
    run_and_report,
)
from vfl_cli.command import REMOVED_IN
from vfl_cli.errors import setup_logging, user_errors
from vfl_cli.option_groups import with_option_groups
from vfl_core.errors import ConfigError

paper_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="The LASER-VFL paper's comparisons: accuracy grid, label-only rows, faults, wire dtypes.",
)
scale_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Scale: time and accuracy against the number of parties; throughput of both transports.",
)
bench_app.add_typer(paper_app, name="paper")
bench_app.add_typer(scale_app, name="scale")


@paper_app.command("accuracy")
@user_errors
@with_option_groups
def accuracy(
    dataset: Annotated[str, Opt(help="credit | mnist | digits")] = "credit",
    seeds: Annotated[str, Opt(help="comma-separated seeds")] = "0,1,2",
    methods: Annotated[str, Opt(help="comma-separated methods")] = (
        "local,svfl,ensemble,combinatorial,plug,laser"
    ),
    p_train: Annotated[str, Opt("--p-miss", help="train p_miss values")] = "0,0.1,0.5",
    p_test: Annotated[
        str, Opt("--p-miss-test", help="test p_miss values (evaluated after each run)")
    ] = ("0,0.1,0.5"),
    epochs: Annotated[int | None, Opt(help="override the setup's epochs")] = None,
    jobs: Jobs = 2,
    data_path: Annotated[Path, Opt(help="directory with the shared data files")] = DEFAULT_DATA,
    bench: BenchRun = BenchRun(),
) -> None:
    """Methods x train p_miss x test p_miss x seeds, cached per run; writes the report."""
    setup_logging(bench.log_level)
    acc, setups = bench_module("paper"), bench_module("setups")
    if dataset not in setups.SETUPS:
        raise ConfigError(f"unknown dataset {dataset!r}; choose from {', '.join(setups.SETUPS)}")
    job = acc.AccuracyJob(
        dataset=dataset,
        methods=parse_methods(methods),
        seeds=parse_ints(seeds, "--seeds"),
        p_train=parse_floats(p_train, "--p-train"),
        p_test=parse_floats(p_test, "--p-test"),
        results=bench.results,
        data_path=data_path if setups.SETUPS[dataset].needs_data_path else None,
        epochs=epochs,
        jobs=jobs,
        command=command_line(),
    )
    run_and_report(acc.run_grid, acc.write_report, job, bench)


@paper_app.command("label-only")
@user_errors
@with_option_groups
def label_only(
    dataset: Annotated[str, Opt(help="credit (the benchmark) or digits")] = "credit",
    seeds: Annotated[str, Opt(help="comma-separated seeds")] = "0,1,2",
    p_miss: Annotated[float, Opt(help="train and test p_miss of every party")] = 0.1,
    epochs: Annotated[int | None, Opt(help="override the setup's epochs")] = None,
    jobs: Jobs = 1,
    data_path: Annotated[Path, Opt(help="directory with UCI_Credit_Card.csv")] = DEFAULT_DATA,
    bench: BenchRun = BenchRun(),
) -> None:
    """Samples only feature-only parties hold: LASER-VFL vs a centralised model (K=3)."""
    setup_logging(bench.log_level)
    if dataset not in ("credit", "digits"):
        raise ConfigError(f"--dataset must be credit or digits, got {dataset!r}")
    if not 0 < p_miss < 1:
        raise ConfigError(f"--p-miss must be in (0, 1), got {p_miss}")
    mod = bench_module("paper")
    job = mod.LabelOnlyJob(
        seeds=parse_ints(seeds, "--seeds"),
        results=bench.results,
        data_path=data_path.resolve() if dataset == "credit" else None,
        dataset=dataset,
        p_miss=p_miss,
        epochs=epochs,
        jobs=jobs,
        command=command_line(),
    )
    run_and_report(mod.run_label_only, mod.write_label_only_report, job, bench)


@paper_app.command("faults")
@user_errors
@with_option_groups
def faults(
    seeds: Annotated[str, Opt(help="comma-separated seeds")] = "0,1,2",
    methods: Annotated[
        str, Opt(help="laser, laser@0 (labels at block 0 only) and split-learning baselines")
    ] = "laser,laser@0,svfl,zerofill,stale",
    scenarios: Annotated[str, Opt(help="all (any party fails), host (block 0 stays up)")] = (
        "all,host"
    ),
    rejoin: Annotated[
        str, Opt("--rejoin-rate", help="R_u values: a failed party comes back per round")
    ] = ("1,0.5,0.1"),
    fail_rate: Annotated[float, Opt("--fault-rate", help="R_d: an up party fails per round")] = 0.3,
    epochs: Annotated[int | None, Opt(help="override the setup's epochs")] = None,
    dataset: Annotated[str, Opt(help="mnist (the benchmark) or digits (quick check)")] = "mnist",
    jobs: Jobs = 1,
    data_path: MnistPath = DEFAULT_DATA,
    bench: BenchRun = BenchRun(),
) -> None:
    """Guest-loss faults (DVFL): LASER-VFL vs split learning that skips, zero-fills or reuses."""
    setup_logging(bench.log_level)
    mod = bench_module("paper.faults")
    chosen = tuple(s.strip() for s in scenarios.split(",") if s.strip())
    if not chosen or any(s not in mod.SCENARIOS for s in chosen):
        raise ConfigError(f"--scenarios must be among {', '.join(mod.SCENARIOS)}")
    if dataset not in ("mnist", "digits"):
        raise ConfigError(f"--dataset must be mnist or digits, got {dataset!r}")
    rates = rejoin_rates(fail_rate, parse_floats(rejoin, "--rejoin"))
    job = mod.FaultJob(
        seeds=parse_ints(seeds, "--seeds"),
        results=bench.results,
        data_path=data_path.resolve() if dataset == "mnist" else None,
        methods=parse_variants(methods, mod.METHODS),
        scenarios=chosen,
        rejoin_rates=rates,
        fail_rate=fail_rate,
        epochs=epochs,
        dataset=dataset,
        jobs=jobs,
        command=command_line(),
    )
    run_and_report(mod.run, mod.write_report, job, bench)


@paper_app.command("wire-dtype")
@user_errors
@with_option_groups
def wire_dtype(
    dtypes: Annotated[str, Opt(help="wire dtypes")] = "float32,float16,bfloat16,int8",
    runs: OptionRuns = OptionRuns(),
    bench: BenchRun = BenchRun(),
) -> None:
    """Accuracy (seeds) and bytes per round of each wire dtype; writes wire_dtype.md."""
    setup_logging(bench.log_level)
    mod = bench_module("wire_dtype")
    dtype_values = parse_variants(dtypes, mod.DTYPES, "wire dtype(s)")
    job = option_job(mod, runs, bench.results, "wire_dtype", dtype_values)
    run_and_report(mod.run, mod.write_report, job, bench)


@scale_app.command("parties")
@user_errors
@with_option_groups
def scaling(
    ks: Annotated[str, Opt("--ks", help="numbers of parties")] = "2,3,4,5,6,7,8",
    methods: Annotated[str, Opt(help="comma-separated methods")] = (
        "laser,combinatorial,ensemble,plug"
    ),
    epochs: Annotated[int, Opt(help="epochs per run")] = 2,
    max_train: Annotated[int, Opt(help="train images (random subset of MNIST-10k)")] = 2000,
    max_test: Annotated[int, Opt(help="test images")] = 1000,
    p_miss: Annotated[float, Opt(help="train and test p_miss of every party")] = 0.1,
    model: Annotated[
        str, Opt("--representation", help="party model: mlp (scaling.md) or cnn (scaling_cnn.md)")
    ] = ("mlp"),
    seed: Annotated[int, Opt(help="seeds data, model and faults")] = 0,
    jobs: Jobs = 1,
    data_path: MnistPath = DEFAULT_DATA,
    bench: BenchRun = BenchRun(),
) -> None:
    """Accuracy and time per epoch against K (MNIST strips); writes scaling.md and a plot."""
    setup_logging(bench.log_level)
    mod = bench_module("scale")
    if model not in mod.MODELS:
        raise ConfigError(f"--representation must be one of {', '.join(mod.MODELS)}, got {model!r}")
    job = mod.ScalingJob(
        ks=parse_ints(ks, "--ks"),
        methods=parse_methods(methods),
        results=bench.results,
        data_path=data_path,
        seed=seed,
        epochs=epochs,
        max_train=max_train,
        max_test=max_test,
        p_miss=p_miss,
        model=model,
        jobs=jobs,
        command=command_line(),
    )
    run_and_report(mod.run, mod.write_report, job, bench)


@scale_app.command("throughput")
@user_errors
def throughput(
    models: Annotated[str, Opt(help="party models: mlp, cnn")] = "mlp,cnn",
    batch_sizes: Annotated[str, Opt(help="batch sizes")] = "128,1024",
    train_samples: Annotated[
        int, Opt("--max-train", help="train images (MNIST-10k subset)")
    ] = 8192,
    warmup: Annotated[int, Opt(help="unmeasured epochs per run")] = 1,
    repeats: Annotated[int, Opt(help="measured epochs per run (median taken)")] = 5,
    staleness: Annotated[
        str, Opt(help="--staleness values, each on both transports (0: exact engine)")
    ] = "0",
    data_path: MnistPath = DEFAULT_DATA,
    results: Results = DEFAULT_RESULTS,
    log_level: LogLevel = "warning",
) -> None:
    """Samples/s in-process vs gRPC on loopback (K=4) and bytes per round vs the minimum."""
    setup_logging(log_level)
    mod = bench_module("scale")
    chosen = tuple(m.strip() for m in models.split(",") if m.strip())
    if not chosen or any(m not in mod.THROUGHPUT_MODELS for m in chosen):
        raise ConfigError(
            f"--models must be among {', '.join(mod.THROUGHPUT_MODELS)}, got {models!r}"
        )
    job = mod.ThroughputJob(
        results=results,
        data_path=data_path.resolve(),
        models=chosen,
        batch_sizes=parse_ints(batch_sizes, "--batch-sizes"),
        train_samples=train_samples,
        warmup=warmup,
        repeats=repeats,
        staleness=parse_ints(staleness, "--staleness"),
        command=command_line(),
    )
    record = mod.run_throughput(job)
    path, text = mod.write_throughput_report(record, results)
    typer.echo(text)
    typer.echo(f"report written to {path}")


@bench_app.command("dvfl")
@user_errors
@with_option_groups
def dvfl(
    seeds: Annotated[str, Opt(help="comma-separated seeds")] = "0,1,2",
    experiments: Annotated[str, Opt(help="faults, labels (few labels), period")] = (
        "faults,labels,period"
    ),
    methods: Annotated[str, Opt(help="methods of the fault table")] = (
        "dvfl,laser,zerofill,stale,svfl"
    ),
    rejoin: Annotated[str, Opt("--rejoin-rate", help="P values of guest loss")] = "1,0.5,0.1",
    host_rejoin: Annotated[str, Opt(help="P values of host and link loss")] = "0.1",
    periods: Annotated[str, Opt(help="DVFL communication periods K (guest epochs)")] = "1,5,10,20",
    labels: Annotated[str, Opt(help="labelled training rows of the few-label runs")] = "128,1024",
    fail_rate: Annotated[
        float, Opt("--fault-rate", help="R_d: an up entity fails per round")
    ] = 0.3,
    epochs: Annotated[int | None, Opt(help="override the guests' (and others') 20 epochs")] = None,
    owner_epochs: Annotated[
        int | None,
        Opt("--dvfl-owner-epochs", help="override DVFL's owner epochs", show_default="60"),
    ] = None,
    dataset: Annotated[str, Opt(help="mnist (the benchmark) or digits (quick check)")] = "mnist",
    jobs: Jobs = 1,
    data_path: MnistPath = DEFAULT_DATA,
    bench: BenchRun = BenchRun(),
) -> None:
    """Decoupled VFL beside LASER-VFL and split learning: faults, few labels, period."""
    setup_logging(bench.log_level)
    mod = bench_module("dvfl")
    chosen = parse_variants(experiments, ("faults", "labels", "period"))
    if dataset not in ("mnist", "digits"):
        raise ConfigError(f"--dataset must be mnist or digits, got {dataset!r}")
    guest = rejoin_rates(fail_rate, parse_floats(rejoin, "--rejoin"))
    host = rejoin_rates(fail_rate, parse_floats(host_rejoin, "--host-rejoin"))
    job = mod.DvflJob(
        seeds=parse_ints(seeds, "--seeds"),
        results=bench.results,
        data_path=data_path.resolve() if dataset == "mnist" else None,
        experiments=chosen,
        methods=parse_variants(methods, mod.FAULT_METHODS),
        guest_rejoin=guest,
        host_rejoin=host,
        periods=parse_ints(periods, "--periods"),
        labels=parse_ints(labels, "--labels"),
        fail_rate=fail_rate,
        epochs=epochs,
        owner_epochs=owner_epochs,
        dataset=dataset,
        jobs=jobs,
        command=command_line(),
    )
    run_and_report(mod.run, mod.write_report, job, bench)


@bench_app.command("dlvm")
@user_errors
@with_option_groups
def dlvm(
    datasets: Annotated[str, Opt(help="mnist, credit (comma-separated)")] = "mnist,credit",
    train: Annotated[str, Opt("--missing", help="training mechanisms")] = "mcar:0.2,mnar:0.7",
    test: Annotated[str, Opt("--missing-test", help="test mechanisms")] = (
        "mcar:0,mcar:0.2,mcar:0.5,mnar:0.7,mnar:0.9,mar1,mar2"
    ),
    methods: Annotated[str, Opt(help="dlvm and label-only methods")] = (
        "dlvm,laser,plug,vanilla,dlvm-product,dlvm-finetune,dlvm-rows"
    ),
    seeds: Annotated[str, Opt(help="comma-separated seeds")] = "0,1,2",
    stage1_epochs: Annotated[int, Opt(help="DLVM stage 1 epochs (all samples)")] = 30,
    stage2_epochs: Annotated[
        int, Opt("--dlvm-stage2-epochs", help="DLVM stage 2 epochs (labelled rows)")
    ] = 30,
    epochs: Annotated[int, Opt(help="epochs of the label-only methods")] = 20,
    jobs: Jobs = 2,
    data_path: MnistPath = DEFAULT_DATA,
    reference: Annotated[
        bool, Opt(help="run the centralised reference (MNIST, nothing missing) instead")
    ] = False,
    bench: BenchRun = BenchRun(),
) -> None:
    """DLVM-VFL's few-label protocol: DLVM vs LASER-VFL and baselines per missingness."""
    setup_logging(bench.log_level)
    mod = bench_module("dlvm")
    from vfl_core.data.missingness import parse_mechanism

    mechanisms = {
        name: tuple(m.strip() for m in text.split(",") if m.strip())
        for name, text in (("--train", train), ("--test", test))
    }
    for spec in (*mechanisms["--train"], *mechanisms["--test"]):
        parse_mechanism(spec)  # a clear error before any run
    chosen = tuple(d.strip() for d in datasets.split(",") if d.strip())
    if not chosen or any(d not in mod.LABELS for d in chosen):
        raise ConfigError(f"--datasets must be among {', '.join(mod.LABELS)}")
    job = mod.DlvmJob(
        datasets=chosen,
        train_mechanisms=mechanisms["--train"],
        test_mechanisms=mechanisms["--test"],
        methods=parse_variants(methods, mod.METHODS),
        seeds=parse_ints(seeds, "--seeds"),
        results=bench.results,
        data_path=data_path.resolve(),
        stage1_epochs=stage1_epochs,
        stage2_epochs=stage2_epochs,
        epochs=epochs,
        jobs=jobs,
        command=command_line(),
        reference=reference,
    )
    run_and_report(mod.run, mod.write_report, job, bench)


# ---------------------------------------------------------------- the names before the suites


def _moved(old: str, new: str, command: Callable[..., None]) -> Callable[..., None]:
    """`vfl bench OLD`, hidden: runs `vfl bench NEW` after a one-line notice on stderr."""

    @functools.wraps(command)
    def run(**kwargs: object) -> None:
        typer.echo(
            f"warning: vfl bench {old} is now vfl bench {new} (accepted until release "
            f"{REMOVED_IN})",
            err=True,
        )
        command(**kwargs)

    return run


# Accepted for a release, as the old spellings of options are (vfl_cli.option_names).
MOVED = {
    "accuracy": ("paper accuracy", accuracy),
    "label-only": ("paper label-only", label_only),
    "faults": ("paper faults", faults),
    "wire-dtype": ("paper wire-dtype", wire_dtype),
    "scaling": ("scale parties", scaling),
    "throughput": ("scale throughput", throughput),
}
for _old, (_new, _command) in MOVED.items():
    bench_app.command(_old, hidden=True)(_moved(_old, _new, _command))
