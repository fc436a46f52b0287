"""`vfl bench accuracy`: run the missing runs of the grid, then write the report and plot."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.paper import (
    collect,
    grid_runs,
    grid_tasks,
    load_runs,
    setup_digest,
    simulate_worker,
    simulation_config,
    summarize,
)
from benchmarks.pool import machine, run_tasks
from benchmarks.report import AccuracyContext, accuracy_markdown, accuracy_plot
from benchmarks.setups import SETUPS, Setup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AccuracyJob:
    dataset: str
    methods: Sequence[str]
    seeds: Sequence[int]
    p_train: Sequence[float]
    p_test: Sequence[float]
    results: Path  # benchmarks/results
    data_path: Path | None = None
    epochs: int | None = None
    jobs: int = 2
    command: str = ""

    @property
    def setup(self) -> Setup:
        return SETUPS[self.dataset]

    @property
    def runs_dir(self) -> Path:
        return self.results / "runs"


def run_grid(job: AccuracyJob, progress: bool = True) -> list[str]:
    """Run every run of the grid that is not cached; returns the labels of failed runs."""
    runs = grid_runs(job.methods, job.p_train, job.seeds)
    tasks = grid_tasks(
        job.setup,
        runs,
        job.runs_dir,
        data_path=job.data_path,
        p_test=job.p_test,
        epochs=job.epochs,
    )
    desc = f"{job.dataset} grid"
    meta = {"command": job.command}
    return run_tasks(simulate_worker, tasks, job.jobs, desc=desc, progress=progress, meta=meta)


def write_report(job: AccuracyJob) -> tuple[Path, str]:
    """Write accuracy_<dataset>.md (+ .png) from the cached runs; returns the path and text."""
    setup = job.setup
    probe = simulation_config(
        setup,
        grid_runs(job.methods[:1], job.p_train[:1], job.seeds[:1])[0],
        p_test=job.p_test,
        epochs=job.epochs,
    )
    digest = setup_digest(setup, json.loads(probe.model_dump_json()))
    records = load_runs(job.runs_dir, setup, digest)
    records = [r for r in records if r["run"]["seed"] in job.seeds]
    stats = summarize(collect(records, setup.metric, job.p_test))
    ctx = AccuracyContext(
        command=job.command,
        machine=records[0]["machine"] if records else machine(),
        methods=job.methods,
        seeds=job.seeds,
        p_train=job.p_train,
        p_test=job.p_test,
        epochs=job.epochs,
        digest=digest,
        run_commands=sorted({r.get("command", "(not recorded)") for r in records}),
    )
    md_path = job.results / f"accuracy_{setup.dataset}.md"
    png = accuracy_plot(stats, setup, ctx, md_path.with_suffix(".png"))
    text = accuracy_markdown(stats, setup, ctx, png.name if png else None)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(text)
    log.info("wrote %s from %d runs", md_path, len(records))
    return md_path, text
