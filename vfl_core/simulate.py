"""Train and evaluate a whole federation in one process (the in-process transport)."""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vfl_core.alignment import DEMO_SECRET
from vfl_core.config import TrainConfig
from vfl_core.data import PartyData, check_federation, load_party_dir
from vfl_core.datasets import load_dataset
from vfl_core.engine import EpochSummary, Federation
from vfl_core.errors import DataError
from vfl_core.faults import FaultConfig, FaultyTransport
from vfl_core.inprocess import InProcessTransport
from vfl_core.metrics import EvalReport
from vfl_core.party import Party
from vfl_core.prepare import prepare_parties
from vfl_core.tabular import TableSource, load_table_federation

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
    test_fraction: float = Field(0.2, gt=0, lt=1)
    layout: str = "auto"
    label_blocks: tuple[int, ...] | None = None
    secret: str = DEMO_SECRET
    train: TrainConfig = TrainConfig()
    faults: FaultConfig = FaultConfig()  # injected party failures and link loss (training only)


@dataclass(frozen=True)
class SimulationResult:
    config: SimulationConfig
    epochs: list[EpochSummary]
    reports: dict[float | None, EvalReport]  # test p_miss (None: the prepared dirs' own test set)
    parties: dict[int, Party]
    seconds: float
    fault_counts: dict[str, int] | None = None

    def to_json(self) -> dict[str, object]:
        out = {
            "config": json.loads(self.config.model_dump_json()),
            "seconds": self.seconds,
            "epochs": [e.__dict__ for e in self.epochs],
            "results": [
                {"p_miss_test": p, **report.to_json()} for p, report in self.reports.items()
            ],
        }
        if self.fault_counts is not None:
            out["faults"] = self.fault_counts
        return out


def run_simulation(config: SimulationConfig, progress: bool = False) -> SimulationResult:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vfl-sim-") as tmp:
        variants = _party_data(config, Path(tmp))
        first = next(iter(variants.values()))
        parties = {
            d.meta.block: Party(
                f"party{d.meta.block}", d, config.train, secret=config.secret.encode()
            )
            for d in first
        }
        transport = InProcessTransport(parties)
        faulty = None
        if config.faults.active:
            faulty = FaultyTransport(transport, config.faults, config.train.seed)
        federation = Federation(
            faulty if faulty is not None else transport, config.train, progress=progress
        )
        federation.align()
        epochs = federation.train()
        if faulty is not None:
            faulty.heal()  # faults model training; evaluation sees every party
        reports: dict[float | None, EvalReport] = {}
        for p_miss, data in variants.items():
            for d in data:
                parties[d.meta.block].replace_split("test", d.splits.get("test"))
            federation.align(("test",))
            reports[p_miss] = federation.evaluate("test")
    counts = faulty.counts() if faulty is not None else None
    seconds = time.perf_counter() - start
    return SimulationResult(config, epochs, reports, parties, seconds, counts)


def _party_data(config: SimulationConfig, tmp: Path) -> dict[float | None, list[PartyData]]:
    """Party data per test p_miss. The train split is the same in every variant (same seed)."""
    if config.party_dirs or config.tables:
        if config.tables:
            data = load_table_federation(config.tables)
        else:
            data = [load_party_dir(p) for p in config.party_dirs]
        check_federation(data)
        return {None: data}
    dataset = load_dataset(config.dataset, config.data_path)
    variants: dict[float | None, list[PartyData]] = {}
    for i, p_test in enumerate(config.p_miss_test):
        out = tmp / f"variant{i}"
        paths = prepare_parties(
            dataset,
            out,
            num_blocks=config.clients,
            p_miss_train=[config.p_miss_train] * config.clients,
            p_miss_test=[p_test] * config.clients,
            test_fraction=config.test_fraction,
            seed=config.train.seed,
            layout=config.layout,
            label_blocks=list(config.label_blocks) if config.label_blocks is not None else None,
        )
        variants[p_test] = [load_party_dir(p) for p in paths]
    if not variants:
        raise DataError("no test p_miss given")
    return variants
