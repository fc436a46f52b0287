"""Train and evaluate a whole federation in one process (the in-process transport)."""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vfl_core.auto_rounds import FAULTS, pin_exact
from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.label_summary import class_counts, class_mapping, rare_class_warnings
from vfl_core.data.missingness import Mechanism, mcar, parse_mechanism
from vfl_core.data.party_dir import PartyData, check_federation, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.data.tabular import TableSource, load_table_federation
from vfl_core.errors import ConfigError, DataError
from vfl_core.inference.metrics import EvalReport
from vfl_core.inference.subsets import SubsetResult
from vfl_core.lifecycle import Variant, run_federation, variants_json
from vfl_core.protocol import Transport
from vfl_core.training.alignment import DEMO_SECRET
from vfl_core.training.engine import Callbacks, EpochSummary, RoundRecord
from vfl_core.training.faults import FaultConfig, check_faults
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

log = logging.getLogger(__name__)


class SimulationConfig(BaseModel):
    """Where the parties' data comes from, and how to train them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str = "digits"
    data_path: Path | None = None  # source files (mnist, credit)
    party_dirs: tuple[Path, ...] = ()  # prepared party directories instead of a data set
    tables: tuple[TableSource, ...] = ()  # or each party's own CSV/Parquet table
    clients: int = Field(4, ge=1)
    p_miss_train: float = Field(0.0, ge=0, lt=1)
    p_miss_test: tuple[float, ...] = (0.0,)
    # Missingness mechanisms (vfl_core.data.missingness specs, e.g. "mnar:0.7") instead of the MCAR
    # probabilities: one for training, one test variant per entry.
    missing_train: str | None = None
    missing_test: tuple[str, ...] = ()
    labels: int | None = Field(None, ge=0)  # keep the labels of only N training samples
    test_fraction: float = Field(0.2, gt=0, lt=1)
    layout: str = "auto"
    label_blocks: tuple[int, ...] | None = None
    # label parties keep the labels of samples whose block they miss (label-only rows)
    keep_labels: bool = False
    # of the `labels`, this many made fully aligned (the DLVM paper's reserve: 100 / 200)
    aligned_labels: int = Field(0, ge=0)
    secret: str = DEMO_SECRET
    # each feature-only party's own seed of its orthogonal tower (vfl-client
    # --private-tower-seed; PrivacyConfig.feature_tower), by block; a block not named draws it
    # from the federation's seed
    private_tower_seeds: dict[int, int] = {}
    train: TrainConfig = TrainConfig()
    faults: FaultConfig = FaultConfig()  # injected party failures and link loss (training only)

    @model_validator(mode="after")
    def _faults_fit_method(self) -> SimulationConfig:
        check_faults(self.faults, self.train.method)
        return self

    @model_validator(mode="after")
    def _own_rows_keep_their_gaps(self) -> SimulationConfig:
        """Tables and prepared party directories bring their own rows, gaps and labels: the
        options that cut a built-in data set were silently not applied to them, and the summary
        still said "train p_miss 0.3". Refused, naming them."""
        if not (self.tables or self.party_dirs):
            return self
        given = [
            option
            for option, on in (
                ("--p-miss", self.p_miss_train != 0.0),
                # the CLI's --p-miss-test defaults to --p-miss
                ("--p-miss-test", self.p_miss_test not in ((0.0,), (self.p_miss_train,))),
                ("--missing", self.missing_train is not None),
                ("--missing-test", bool(self.missing_test)),
                ("--labels", self.labels is not None),
                ("--keep-labels", self.keep_labels),
                ("--aligned-labels", self.aligned_labels != 0),
            )
            if on
        ]
        if given:
            own = f"{'tables' if self.tables else 'party directories'} (--data)"
            raise ConfigError(
                f"{', '.join(given)} cut{'s' * (len(given) == 1)} a built-in data set "
                f"(--dataset); {own} bring their own rows: a party misses the samples its "
                "table lacks, and a label party's labels are the ones it holds. Leave "
                f"{'it' if len(given) == 1 else 'them'} out"
            )
        return self


@dataclass(frozen=True)
class SimulationResult:
    config: SimulationConfig
    epochs: list[EpochSummary]
    # by test p_miss, or mechanism spec (None: the prepared dirs' own test set)
    reports: dict[Variant, EvalReport]
    parties: dict[int, Party]
    seconds: float
    fault_counts: dict[str, int] | None = None
    # test metrics with only these parties, per test p_miss (empty unless asked for)
    subsets: dict[Variant, list[SubsetResult]] = field(default_factory=dict)
    method_stats: dict[str, object] | None = None  # a round program's figures (dvfl: bytes)
    early_stop: dict[str, object] | None = None  # vfl_core.training.early_stop's record, when on
    choice: dict[str, object] | None = None  # what validation chose (vfl_core.inference.choice)

    @property
    def task(self) -> str:
        """classification or regression (every party agrees: the engine checks it)."""
        return next(iter(self.parties.values())).data.meta.task

    def to_json(self) -> dict[str, object]:
        out = {
            "config": json.loads(self.config.model_dump_json()),
            "seconds": self.seconds,
            "epochs": [e.__dict__ for e in self.epochs],
            "results": variants_json(self.reports, self.subsets),
        }
        if self.fault_counts is not None:
            out["faults"] = self.fault_counts
        if self.method_stats is not None:
            out["method"] = self.method_stats
        if self.early_stop is not None:
            out["early_stop"] = self.early_stop
        if self.choice is not None:
            out["validation_choice"] = self.choice
        if self.class_mappings:
            out["labels"] = self.class_mappings
        return out

    @property
    def class_mappings(self) -> list[dict[str, object]]:
        """Each label party's classes as written in its table (vfl_core.data.label_summary), in
        block order; [] where no party names its classes (a built-in data set, regression)."""
        found = (class_mapping(party.data) for _, party in sorted(self.parties.items()))
        return [mapping for mapping in found if mapping is not None]


def run_simulation(
    config: SimulationConfig,
    progress: bool = False,
    run_dir: Path | None = None,
    subsets: bool = False,
    eval_every: int = 0,
    on_round: Callable[[RoundRecord], None] | None = None,
    wrap: Callable[[Transport], Transport] | None = None,
) -> SimulationResult:
    """Train, then evaluate each test p_miss (and with `subsets`, every observed set of parties
    too). With `run_dir`, write what the coordinator writes: config.json, epochs.jsonl (a test
    evaluation every `eval_every` epochs) and results.json, which `vfl report` reads. `on_round`
    sees every round (e.g. to compare with a coordinator's rounds.jsonl). `wrap` wraps the
    in-process transport (vfl bench privacy records there what a coordinator relays)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vfl-sim-") as tmp:
        variants = party_data(config, Path(tmp))
        # injected faults: every party told exact rounds, as a coordinator tells them
        train = pin_exact(config.train, FAULTS if config.faults.active else None)
        parties = _parties(config, train, next(iter(variants.values())))
        transport: Transport = InProcessTransport(parties)
        results = run_federation(
            transport if wrap is None else wrap(transport),
            train,
            config=config,
            kind="simulate",
            run_id="simulate",
            out=run_dir,
            eval_every=eval_every,
            observers=[Callbacks(round=on_round)] if on_round is not None else [],
            progress=progress,
            faults=config.faults,
            tests={key: partial(_install_test, parties, data) for key, data in variants.items()},
            subsets=subsets,
        )
    seconds = time.perf_counter() - start
    if run_dir is not None:
        results.write(run_dir)
    return SimulationResult(
        results.config if isinstance(results.config, SimulationConfig) else config,  # resolved
        results.epochs,
        results.reports,
        parties,
        seconds,
        results.faults,
        results.subsets,
        results.method,
        results.early_stop,
        results.choice,
    )


def _parties(
    config: SimulationConfig, train: TrainConfig, data: list[PartyData]
) -> dict[int, Party]:
    """The parties, with the first test variant's split."""
    return {
        d.meta.block: Party(
            f"party{d.meta.block}",
            d,
            train,
            secret=config.secret.encode(),
            tower_seed=config.private_tower_seeds.get(d.meta.block),
        )
        for d in data
    }


def _install_test(parties: dict[int, Party], data: list[PartyData]) -> None:
    """Give every party its test split of one variant."""
    for d in data:
        parties[d.meta.block].replace_split("test", d.splits.get("test"))


def _check_test_rows(tables: tuple[TableSource, ...], data: list[PartyData]) -> None:
    """A small table split by ID hash may put none of its rows in the test split (a 2-row
    table, stop-40 QA): with no label party's test row there is nothing to score, and the
    evaluation failed with a KeyError. Said before training instead, naming the tables."""
    labelled = [d for d in data if d.meta.has_labels]
    if not tables or any(len(d.splits["test"].ids) for d in labelled if "test" in d.splits):
        return
    paths = {t.block: str(t.path) for t in tables}
    named = ", ".join(paths[d.meta.block] for d in labelled)
    rows = sum(len(d.splits["train"].ids) for d in labelled)
    raise DataError(
        f"{named}: no test rows among the label parties' {rows} rows (a row is a test row when "
        f"a hash of its ID falls below --test-fraction {tables[0].test_fraction:g}), so nothing "
        "can be scored: give each table's test rows in a file of their own (--test-data), a "
        "larger --test-fraction, or more rows"
    )


def _warn_of_rare_classes(data: list[PartyData]) -> None:
    """What vfl-client and vfl prepare say of a class with very few training rows, said by
    vfl simulate too (a class of 1 training row would otherwise pass unsaid)."""
    for d in data:
        for warning in rare_class_warnings(class_counts(d)):
            log.warning("block %d: %s", d.meta.block, warning)


def party_data(config: SimulationConfig, tmp: Path) -> dict[Variant, list[PartyData]]:
    """Party data per test variant (p_miss or mechanism). The train split is the same in every
    variant (same seed). Data sets are prepared into `tmp` (benchmarks use it to see exactly
    what a run trains on)."""
    if config.party_dirs or config.tables:
        if config.tables:
            data = load_table_federation(config.tables)
            _warn_of_rare_classes(data)
        else:
            data = [load_party_dir(p) for p in config.party_dirs]
        check_federation(data)
        _check_test_rows(config.tables, data)
        return {None: data}
    dataset = load_dataset(config.dataset, config.data_path)
    tests: list[tuple[Variant, Mechanism]] = [
        (spec, parse_mechanism(spec)) for spec in config.missing_test
    ] or [(p, mcar([p] * config.clients)) for p in config.p_miss_test]
    train = mcar([config.p_miss_train] * config.clients)
    if config.missing_train is not None:
        train = parse_mechanism(config.missing_train)
    variants: dict[Variant, list[PartyData]] = {}
    for i, (key, test) in enumerate(tests):
        out = tmp / f"variant{i}"
        paths = prepare_parties(
            dataset,
            out,
            num_blocks=config.clients,
            p_miss_train=[config.p_miss_train] * config.clients,
            p_miss_test=[0.0] * config.clients,  # replaced by the test mechanism
            test_fraction=config.test_fraction,
            seed=config.train.seed,
            layout=config.layout,
            label_blocks=list(config.label_blocks) if config.label_blocks is not None else None,
            mechanisms={"train": train, "test": test},
            labels=config.labels,
            keep_labels=config.keep_labels,
            aligned_labels=config.aligned_labels,
        )
        variants[key] = [load_party_dir(p) for p in paths]
    if not variants:
        raise DataError("no test p_miss given")
    return variants
