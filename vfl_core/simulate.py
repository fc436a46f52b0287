"""Train and evaluate a whole federation in one process (the in-process transport)."""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vfl_core.alignment import DEMO_SECRET
from vfl_core.config import TrainConfig
from vfl_core.datasets import load_dataset
from vfl_core.engine import EpochSummary, Federation, RoundRecord
from vfl_core.errors import DataError
from vfl_core.faults import FaultConfig, FaultyTransport, check_faults
from vfl_core.inprocess import InProcessTransport
from vfl_core.metrics import EvalReport
from vfl_core.missingness import Mechanism, mcar, parse_mechanism
from vfl_core.party import Party
from vfl_core.party_dir import PartyData, check_federation, load_party_dir
from vfl_core.prepare import prepare_parties
from vfl_core.run_log import RunLog
from vfl_core.subsets import SubsetResult, evaluate_subsets
from vfl_core.tabular import TableSource, load_table_federation

log = logging.getLogger(__name__)

# A test variant: its MCAR p_miss, its mechanism spec ("mnar:0.7"), or None (prepared dirs).
Variant = float | str | None


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
    # Missingness mechanisms (vfl_core.missingness specs, e.g. "mnar:0.7") instead of the MCAR
    # probabilities: one for training, one test variant per entry.
    missing_train: str | None = None
    missing_test: tuple[str, ...] = ()
    labels: int | None = Field(None, ge=0)  # keep the labels of only N training samples
    test_fraction: float = Field(0.2, gt=0, lt=1)
    layout: str = "auto"
    label_blocks: tuple[int, ...] | None = None
    # label parties keep the labels of samples whose block they miss (label-only rows)
    keep_labels: bool = False
    secret: str = DEMO_SECRET
    train: TrainConfig = TrainConfig()
    faults: FaultConfig = FaultConfig()  # injected party failures and link loss (training only)

    @model_validator(mode="after")
    def _faults_fit_method(self) -> SimulationConfig:
        check_faults(self.faults, self.train.method)
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
    early_stop: dict[str, object] | None = None  # vfl_core.early_stop's record, when on

    @property
    def task(self) -> str:
        """classification or regression (every party agrees: the engine checks it)."""
        return next(iter(self.parties.values())).data.meta.task

    def to_json(self) -> dict[str, object]:
        out = {
            "config": json.loads(self.config.model_dump_json()),
            "seconds": self.seconds,
            "epochs": [e.__dict__ for e in self.epochs],
            "results": [
                {**variant_json(p), **report.to_json(), **self._subsets_json(p)}
                for p, report in self.reports.items()
            ],
        }
        if self.fault_counts is not None:
            out["faults"] = self.fault_counts
        if self.method_stats is not None:
            out["method"] = self.method_stats
        if self.early_stop is not None:
            out["early_stop"] = self.early_stop
        return out

    def _subsets_json(self, p_miss: Variant) -> dict[str, object]:
        if p_miss not in self.subsets:
            return {}
        return {"subsets": [r.to_json() for r in self.subsets[p_miss]]}


def run_simulation(
    config: SimulationConfig,
    progress: bool = False,
    run_dir: Path | None = None,
    subsets: bool = False,
    eval_every: int = 0,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> SimulationResult:
    """Train, then evaluate each test p_miss (and with `subsets`, every observed set of parties
    too). With `run_dir`, write what the coordinator writes: config.json, epochs.jsonl (a test
    evaluation every `eval_every` epochs) and results.json, which `vfl report` reads."""
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="vfl-sim-"))
        variants = party_data(config, Path(tmp))
        parties, transport, faulty = _federation_parts(config, variants)
        federation = Federation(
            faulty if faulty is not None else transport,
            config.train,
            progress=progress,
            on_round=on_round,  # e.g. to compare with a coordinator's rounds.jsonl
        )
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.json").write_text(config.model_dump_json(indent=2))
            stack.enter_context(RunLog(run_dir, eval_every=eval_every)).attach(federation)
        federation.align()
        epochs = federation.train()
        if faulty is not None:
            faulty.heal()  # faults model training; evaluation sees every party
        reports: dict[Variant, EvalReport] = {}
        by_subset: dict[Variant, list[SubsetResult]] = {}
        for p_miss, data in variants.items():
            for d in data:
                parties[d.meta.block].replace_split("test", d.splits.get("test"))
            federation.align(("test",))
            reports[p_miss] = federation.evaluate("test")
            if subsets:
                by_subset[p_miss] = evaluate_subsets(federation, "test")
    counts = faulty.counts() if faulty is not None else None
    seconds = time.perf_counter() - start
    stats = federation.method_stats()
    stop = None if federation.early_stop is None else federation.early_stop.to_json()
    result = SimulationResult(
        config, epochs, reports, parties, seconds, counts, by_subset, stats, stop
    )
    if run_dir is not None:
        write_run_results(run_dir, result, federation)
    return result


def _federation_parts(
    config: SimulationConfig, variants: dict[Variant, list[PartyData]]
) -> tuple[dict[int, Party], InProcessTransport, FaultyTransport | None]:
    """The parties (with the first variant's test split), their transport and the fault
    injector around it (None without faults)."""
    first = next(iter(variants.values()))
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, config.train, secret=config.secret.encode())
        for d in first
    }
    transport = InProcessTransport(parties)
    faulty = None
    if config.faults.active:
        faulty = FaultyTransport(transport, config.faults, config.train.seed)
    return parties, transport, faulty


def write_run_results(run_dir: Path, result: SimulationResult, fed: Federation) -> None:
    """results.json in the coordinator's layout, for the first test p_miss; every p_miss under
    "variants"."""
    first = next(iter(result.reports), None)
    results = {
        "run_id": "simulate",
        "task": fed.task,  # which metrics the rows hold (vfl_core.headline)
        "config": json.loads(result.config.model_dump_json()),
        "epochs": [e.__dict__ for e in result.epochs],
        "test": result.reports[first].to_json() if result.reports else None,
        "subsets": [r.to_json() for r in result.subsets.get(first, [])],
        "transitions": [t.__dict__ for t in fed.liveness.transitions],
        "transition_counts": fed.liveness.counts(),
        "rounds": fed.round_id,
        "method": fed.method_stats(),
        "early_stop": result.early_stop,
        "variants": result.to_json()["results"],
    }
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))


def party_data(config: SimulationConfig, tmp: Path) -> dict[Variant, list[PartyData]]:
    """Party data per test variant (p_miss or mechanism). The train split is the same in every
    variant (same seed). Data sets are prepared into `tmp` (benchmarks use it to see exactly
    what a run trains on)."""
    if config.party_dirs or config.tables:
        if config.tables:
            data = load_table_federation(config.tables)
        else:
            data = [load_party_dir(p) for p in config.party_dirs]
        check_federation(data)
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
        )
        variants[key] = [load_party_dir(p) for p in paths]
    if not variants:
        raise DataError("no test p_miss given")
    return variants


def variant_json(variant: Variant) -> dict[str, object]:
    """How results.json names a test variant: its p_miss, or its mechanism."""
    if isinstance(variant, str):
        return {"p_miss_test": None, "missing_test": variant}
    return {"p_miss_test": variant}
