"""`vfl simulate`: a whole federation in one process, with a result table and a JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vfl_cli import defaults
from vfl_cli import table_options as tables
from vfl_cli.errors import setup_logging, user_errors
from vfl_cli.fault_options import FaultOptions
from vfl_cli.option_groups import with_option_groups
from vfl_cli.options import (
    from_file,
    given,
    parse_ints,
    read_config_file,
    refuse_unknown_keys,
    samples,
)
from vfl_cli.train_options import TrainOptions
from vfl_core.errors import ConfigError

# torch: imported when a simulation runs, not for --help
if TYPE_CHECKING:
    from vfl_core.data.tabular import TableSource
    from vfl_core.inference.headline import Metric
    from vfl_core.inference.subsets import SubsetResult
    from vfl_core.simulate import SimulationConfig, SimulationResult

Opt = typer.Option
# A config file's keys beyond this command's own options: TrainConfig's, and a `faults:` map.
TRAIN_KEYS = {*defaults.TRAIN, "model", "dvfl", "dlvm"}


@user_errors
@with_option_groups
def simulate(
    ctx: typer.Context,
    dataset: Annotated[
        str, Opt(help="digits, diabetes (embedded; diabetes is regression), mnist or credit")
    ] = "digits",
    data_path: Annotated[Path | None, Opt(help="source files for mnist/credit")] = None,
    data: Annotated[
        list[Path] | None,
        Opt(
            help="a party directory (vfl prepare) or a party's own CSV/Parquet table, block k "
            "the k-th (repeat)",
            show_default="--dataset",
        ),
    ] = None,
    test_data: Annotated[
        list[Path] | None,
        Opt(
            help="tables: the test rows of each --data table, in the same order (repeat)",
            show_default="split each table by ID",
        ),
    ] = None,
    id_column: tables.IdColumn = None,
    label_column: Annotated[
        str | None, Opt(help="tables: label column (its parties: --label-blocks or those with it)")
    ] = None,
    features: Annotated[
        list[str] | None,
        Opt(
            help="tables: one party's feature columns, BLOCK:COLUMNS (block k is the k-th "
            "--data), e.g. 1:age,city (repeat)",
            show_default="all but ID and label",
        ),
    ] = None,
    ignore_columns: Annotated[
        list[str] | None,
        Opt(
            help="tables: columns a party leaves out, BLOCK:COLUMNS, e.g. 1:notes (repeat; not "
            "with the block's --features)",
            show_default="none",
        ),
    ] = None,
    categorical: Annotated[
        list[str] | None,
        Opt(
            help="tables: a party's columns that are categories whatever their cells (codes "
            "written as numbers), BLOCK:COLUMNS, e.g. 1:zip (repeat)",
            show_default="text columns",
        ),
    ] = None,
    max_onehot: tables.MaxOnehot = tables.DEFAULTS["max_onehot"],
    task: tables.TaskOption = None,
    positive_class: tables.PositiveClass = None,
    clients: Annotated[int, Opt(help="number of parties K")] = 4,
    p_miss: Annotated[
        float,
        Opt(help="probability a party misses a training sample (and a test one: --p-miss-test)"),
    ] = 0.0,
    p_miss_test: Annotated[
        list[float] | None, Opt(help="test p_miss (repeat)", show_default="--p-miss")
    ] = None,
    missing: Annotated[
        str | None,
        Opt(
            help="training missingness instead of --p-miss: mcar:P, mnar:P, mar1, mar2[:B], "
            "mar1-anchor[:P], mar2-anchor[:P]"
        ),
    ] = None,
    missing_test: Annotated[
        list[str] | None, Opt(help="test missingness mechanism instead of --p-miss-test (repeat)")
    ] = None,
    labels: Annotated[
        int | None,
        Opt(
            help="keep the labels of only N training samples (the rest unlabelled)",
            show_default="all",
        ),
    ] = None,
    test_fraction: Annotated[float, Opt(help="share of the samples in the test split")] = 0.2,
    label_blocks: Annotated[
        str | None, Opt(help="blocks holding labels, e.g. 0,1", show_default="all")
    ] = None,
    keep_labels: Annotated[
        bool, Opt(help="label parties keep the labels of samples whose block they miss")
    ] = False,
    config: Annotated[
        Path | None,
        Opt(
            help="YAML/JSON: TrainConfig's keys (epochs:, model: ...), a key per option of this "
            "command (dataset:, p_miss: ...) and a `faults:` map; a flag given beats its key"
        ),
    ] = None,
    train: TrainOptions = TrainOptions(),
    faults: FaultOptions = FaultOptions(),
    out: Annotated[Path, Opt(help="JSON result file")] = Path("runs/simulate.json"),
    run_dir: Annotated[
        Path | None,
        Opt(help="also write a run directory (epochs.jsonl, results.json) for `vfl report`"),
    ] = None,
    eval_every: Annotated[
        int, Opt(help="with --run-dir: evaluate the test split every N epochs (0: never)")
    ] = 0,
    threads: Annotated[int, Opt(help="torch CPU threads")] = 1,
    progress: Annotated[
        bool, Opt(help="show a progress bar (on a terminal; logs get a line per epoch)")
    ] = True,
    log_level: Annotated[str, Opt(help="debug | info | warning | error")] = "warning",
) -> None:
    """Train and evaluate LASER-VFL with every party in this process."""
    own = {k: v for k, v in locals().items() if k not in ("ctx", "config", "train", "faults")}
    settings = read_config_file(config)
    refuse_unknown_keys(config, settings, {*own, *TRAIN_KEYS, "faults"})
    named = {*given(ctx, own), *settings}  # on the command line or in the config file
    o = from_file(ctx, settings, own)
    fault_config = _fault_config(ctx, faults, settings.pop("faults", None) or {})
    setup_logging(o["log_level"])
    import torch  # not for --help

    from vfl_core.simulate import SimulationConfig, run_simulation

    torch.set_num_threads(o["threads"])
    train_config = train.config(settings)
    party_dirs, sources = _parties(o)
    if "clients" in named and party_dirs + sources and o["clients"] != len(party_dirs + sources):
        # K is the number of --data; another --clients was silently not applied
        raise ConfigError(
            f"--clients {o['clients']}: K is the number of --data ({len(party_dirs + sources)}) "
            "with tables or party directories; leave --clients out"
        )
    p_miss_test = o["p_miss_test"]
    label_blocks = parse_ints(o["label_blocks"], "--label-blocks")
    sim = SimulationConfig(
        dataset=o["dataset"],
        data_path=o["data_path"],
        party_dirs=party_dirs,
        tables=sources,
        clients=o["clients"],
        p_miss_train=o["p_miss"],
        p_miss_test=tuple(p_miss_test) if p_miss_test else (o["p_miss"],),
        missing_train=o["missing"],
        missing_test=tuple(o["missing_test"] or ()),
        labels=o["labels"],
        test_fraction=o["test_fraction"],
        label_blocks=label_blocks,
        keep_labels=o["keep_labels"],
        train=train_config,
        faults=fault_config,
    )
    eval_every, run_dir, out = o["eval_every"], o["run_dir"], Path(o["out"])
    if eval_every < 0:
        raise ConfigError(f"--eval-every must be 0 or more, not {eval_every}")
    if eval_every and run_dir is None:
        raise ConfigError("--eval-every writes to epochs.jsonl: give a --run-dir")
    run_dir = None if run_dir is None else Path(run_dir)
    result = run_simulation(
        sim, progress=o["progress"], run_dir=run_dir, subsets=True, eval_every=eval_every
    )
    for party in result.parties.values():  # numbers that look like codes
        for warning in party.data.warnings:
            typer.echo(f"warning: {warning}", err=True)
    typer.echo(render(result))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_json(), indent=2))
    typer.echo(f"results written to {out}")
    if run_dir is not None:
        typer.echo(f"run directory {run_dir}; see it with `vfl report {run_dir}`")


def _fault_config(ctx: typer.Context, faults: FaultOptions, base: dict[str, Any]) -> Any:
    """The FaultConfig of a config file's `faults:` map with the fault options given over it."""
    from vfl_core.training.faults import FaultConfig

    faults.config()  # refuses a bad --fault-entity
    return FaultConfig.model_validate(faults.over(ctx, base))


def _paths(value: Any) -> list[Path]:
    """A repeated path option's paths (a config file may give one path or a list)."""
    if value is None:
        return []
    return [Path(value)] if isinstance(value, (str, Path)) else [Path(p) for p in value]


def _parties(o: dict[str, Any]) -> tuple[tuple[Path, ...], tuple[TableSource, ...]]:
    """The party directories or the tables of --data (one kind, not both)."""
    from vfl_core.data.table_files import is_table_file
    from vfl_core.data.tabular import federation_sources

    paths, test_paths = _paths(o["data"]), _paths(o["test_data"])
    is_table = [is_table_file(p) for p in paths]
    if any(is_table) and not all(is_table):
        raise ConfigError("--data: give party directories or CSV/Parquet tables, not both")
    if not paths or not all(is_table):
        for option in ("task", "features", "ignore_columns", "categorical", "positive_class"):
            if o[option] is not None:
                raise ConfigError(
                    f"--{option.replace('_', '-')} applies to --data tables (party directories "
                    "and data sets hold their own features and name their task)"
                )
        return tuple(paths), ()
    if o["id_column"] is None:
        raise ConfigError("--data tables need --id-column")
    sources = federation_sources(
        paths,
        test_paths or None,
        id_column=o["id_column"],
        label_column=o["label_column"],
        label_blocks=parse_ints(o["label_blocks"], "--label-blocks"),
        test_fraction=o["test_fraction"],
        max_onehot=o["max_onehot"],
        task=tables.parse_task(o["task"]),
        features=tables.party_features(_listed(o["features"]), len(paths)),
        positive_class=o["positive_class"],
        ignore_columns=tables.party_features(
            _listed(o["ignore_columns"]), len(paths), "--ignore-columns"
        ),
        categorical=tables.party_features(_listed(o["categorical"]), len(paths), "--categorical"),
    )
    return (), tuple(sources)


def _listed(value: Any) -> list[str] | None:
    """A repeated option's values (a config file may give one string)."""
    return [value] if isinstance(value, str) else value


def render(result: SimulationResult) -> str:
    from vfl_core.data.label_summary import describe_mapping
    from vfl_core.inference.headline import headline
    from vfl_core.inference.metrics import format_table, unscored_note

    cfg = result.config
    last = result.epochs[-1] if result.epochs else None
    source = "tables" if cfg.tables else "party dirs" if cfg.party_dirs else cfg.dataset
    lines = [
        f"trained {_epochs_trained(result)} on {source}"
        f" with K={len(result.parties)},{_train_missing(cfg)} seed {cfg.train.seed}"
        + (f"; last epoch mean head loss {last.mean_loss:.4f}" if last else "")
        + f"; {result.seconds:.1f}s",
    ]
    lines += [describe_mapping(mapping) for mapping in result.class_mappings]
    lines += _choice_lines(result.choice)
    if result.fault_counts is not None:
        counts = ", ".join(f"{k} {v}" for k, v in result.fault_counts.items())
        lines.append(f"injected faults: {counts}")
    for p_miss, report in result.reports.items():
        title = "test set" if p_miss is None else f"test p_miss {p_miss}"
        if isinstance(p_miss, str):
            title = f"test missing {p_miss}"
        lines += ["", format_table(report.rows(), title=title)]
        if report.unscored:
            lines.append(unscored_note(report.unscored))
        lines += drop_one_lines(result.subsets.get(p_miss, []), headline(result.task))
    return "\n".join(lines)


def _epochs_trained(result: SimulationResult) -> str:
    """'60 epochs', or with early stopping '12 of at most 60 epochs (early stop: best
    validation epoch 7, restored)'."""
    ceiling, ran = result.config.train.total_epochs, len(result.epochs)
    stop = result.early_stop
    if stop is None:
        return f"{ran} epochs"
    best = stop["best_epoch"]  # 1-based, as in the log (vfl_core.training.early_stop)
    why = "early stop" if stop["stopped_epoch"] is not None else "no early stop"
    return f"{ran} of at most {ceiling} epochs ({why}: best validation epoch {best}, restored)"


def _choice_lines(choice: dict | None) -> list[str]:
    """What the validation split chose (vfl_core.inference.choice), one line each."""
    if not choice:
        return []
    lines = []
    if choice.get("threshold") is not None:
        plain, tuned = choice["threshold_f1"]
        metric = "F1" if choice.get("threshold_metric", "f1") == "f1" else "accuracy"
        rule = choice.get("threshold_rule")
        lines.append(
            f"decision threshold {choice['threshold']:.3f} chosen on validation"
            f"{f' by {rule}' if rule else ''} "
            f"(validation {metric} {100 * plain:.2f} at 0.5 -> {100 * tuned:.2f})"
        )
    for pick in choice.get("subsets", []):
        observed, kept = ",".join(map(str, pick["observed"])), ",".join(map(str, pick["kept"]))
        lines.append(f"observed set {observed} predicted from parties {kept} (validation)")
    for pick in choice.get("heads", []):
        observed = ",".join(map(str, pick["observed"]))
        lines.append(
            f"observed set {observed} predicted with the {pick['head']} heads (validation)"
        )
    return lines


def _train_missing(cfg: SimulationConfig) -> str:
    """ " train p_miss 0.1," for a built-in data set; "" for tables and party directories,
    whose gaps are their own rows (SimulationConfig refuses these options for them)."""
    if cfg.tables or cfg.party_dirs:
        return ""
    text = f"missing {cfg.missing_train}" if cfg.missing_train else f"p_miss {cfg.p_miss_train}"
    return f" train {text}," if cfg.labels is None else f" train {text}, {cfg.labels} labels,"


def drop_one_lines(subsets: list[SubsetResult], metric: Metric) -> list[str]:
    """The run's headline metric without each party, next to its value with all of them:
    "without party 2: accuracy 85.20% (-1.30 points)", "without party 2: RMSE 61.3 (+2.7)"."""
    if len(subsets) < 2:
        return []
    full = subsets[0]  # observed_subsets lists the full set first
    with_all = full.value(metric.key)
    lines = []
    for drop in full.blocks:
        rest = next((r for r in subsets if set(r.blocks) == set(full.blocks) - {drop}), None)
        if rest is None:
            continue
        # the rest's unscored count: samples no head party of the rest (or none the method can
        # use) predicted, including any that were unscored with every party too
        lost = f"{samples(rest.unscored)} unscored without it" if rest.unscored else ""
        value = rest.value(metric.key)
        if value is None:
            lines.append(f"without party {drop}: nothing scored" + (f" ({lost})" if lost else ""))
            continue
        shown = f"without party {drop}: {metric.label} {metric.format(value)}"
        if with_all is not None:
            change = metric.format_change(value - with_all, with_all)
            lines.append(f"{shown} ({change}" + (f"; {lost})" if lost else ")"))
        else:
            lines.append(shown + (f" ({lost})" if lost else ""))
    return lines
