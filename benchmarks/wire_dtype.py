"""`vfl bench paper wire-dtype`: what each wire dtype of embeddings and gradients
(vfl_core.model.quantize)
costs in accuracy and saves in bytes.

Accuracy: LASER-VFL with the accuracy grid's setups (benchmarks/setups.py: Credit with the
paper's MLP for 100 epochs, MNIST-10k quadrants with the small CNN for 30), train p_miss 0, test
p_miss 0 / 0.1 / 0.5, every seed, one run per (data set, wire dtype, seed), in process: the
in-process transport rounds exactly where the gRPC one encodes, so these are the real
federation's numbers (tests/test_wire_dtype.py pins the bit-identity). Runs are cached like the
grid's, in results/runs/wire_dtype/<dataset>/ (the wire dtype is part of the setup digest).

Bytes: one audited epoch of the real federation per (data set, wire dtype) (vfl-coordinator
--audit-log, as `vfl bench scale throughput` does): the serialized training calls (Train, Fuse)
messages to and from the coordinator, per round.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import scale
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
from benchmarks.pool import code_version, machine, read_json, run_tasks, write_json
from benchmarks.setups import P_MISS, SETUPS, Setup, kept_notes, md_table, metric_label

log = logging.getLogger(__name__)

DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "int8")
BYTES_FILE = "wire_dtype.json"
# TrainConfig options this benchmark varies: the lossless value first (the reference)
OPTIONS: dict[str, tuple[str, ...]] = {"wire_dtype": DTYPES, "staleness": ("0", "3", "7", "15")}


@dataclass(frozen=True)
class WireDtypeJob:
    results: Path
    data_path: Path
    datasets: Sequence[str] = ("mnist", "credit")
    values: Sequence[str] = DTYPES  # of `option`; the first is the reference
    seeds: Sequence[int] = (0, 1, 2)
    jobs: int = 2
    command: str = ""
    option: str = "wire_dtype"  # or "staleness" (its accuracy cost, for wan.md)

    @property
    def runs_dir(self) -> Path:
        """One cache for every option (the reference runs, float32 and staleness 0, are the
        same runs), apart from the accuracy grid's, whose digests ignore these options."""
        return self.results / "runs" / "options"

    @property
    def dtypes(self) -> Sequence[str]:
        return self.values


NOTES = "## Reading it"  # a hand-written section a rewrite of the report keeps
REFERENCE: dict[str, str] = {option: values[0] for option, values in OPTIONS.items()}


def setup_for(dataset: str, dtype: str, option: str = "wire_dtype") -> Setup:
    """The grid's setup of `dataset` with this value of `option` (part of the digest, so
    cached apart); the reference value (TrainConfig's default) is the grid's setup itself."""
    base = SETUPS[dataset]
    if dtype == REFERENCE[option]:
        return base
    value: str | int = int(dtype) if option == "staleness" else dtype
    return dataclasses.replace(base, train={**base.train, option: value})


def _options_of(record: dict[str, Any]) -> dict[str, str]:
    """The values of OPTIONS a cached run trained with (defaults where it does not say)."""
    train = record["config"]["train"]
    return {option: str(train.get(option, REFERENCE[option])) for option in OPTIONS}


def run(job: WireDtypeJob, progress: bool = True) -> list[str]:
    """The accuracy runs that are not cached, then the audited byte counts; failed labels."""
    tasks = [
        dataclasses.replace(task, label=f"{dataset} {dtype} {task.label}")
        for dataset in job.datasets
        for dtype in job.dtypes
        for task in grid_tasks(
            setup_for(dataset, dtype, job.option),
            grid_runs(["laser"], [0.0], job.seeds),
            job.runs_dir,
            data_path=job.data_path,
        )
    ]
    meta = {"command": job.command}
    failed = run_tasks(
        simulate_worker, tasks, job.jobs, desc=job.option, progress=progress, meta=meta
    )
    if job.option == "wire_dtype":
        write_json(job.results / BYTES_FILE, measure_bytes(job))
    return failed


def measure_bytes(job: WireDtypeJob) -> dict[str, Any]:
    """One audited gRPC epoch per (data set, wire dtype): bytes per training round."""
    rows = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="vfl-wire-dtype-") as tmp_dir:
        tmp = Path(tmp_dir)
        for dataset in job.datasets:
            dirs = _party_dirs(dataset, job.data_path, tmp / dataset)
            for dtype in job.dtypes:
                train = {**setup_for(dataset, dtype).train, "seed": 0, "epochs": 1}
                train["model"] = dict(train["model"])
                audit = tmp / f"{dataset}-{dtype}.audit"
                log.info("wire dtype bytes: %s %s", dataset, dtype)
                result = scale.grpc_run(dirs, train, tmp / f"{dataset}-{dtype}", audit)
                volume = scale.audited_bytes(audit)
                rounds = result["rounds"]
                rows.append(
                    {
                        "dataset": dataset,
                        "dtype": dtype,
                        "batch": train["batch_size"],
                        "embed_dim": train["model"]["embed_dim"],
                        "rounds": rounds,
                        "bytes_per_round": volume["bytes"] / rounds,
                        "tensor_bytes_per_round": volume["tensor_bytes"] / rounds,
                    }
                )
    return {
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "code": code_version(),
        "load_average": [load, os.getloadavg()[0]],
        "command": job.command,
        "rows": rows,
    }


def _party_dirs(dataset: str, data_path: Path, out: Path) -> list[Path]:
    from vfl_core.data.datasets import load_dataset
    from vfl_core.data.prepare import prepare_parties

    setup = SETUPS[dataset]
    k = setup.clients
    return prepare_parties(
        load_dataset(dataset, data_path),
        out,
        num_blocks=k,
        p_miss_train=[0.0] * k,
        p_miss_test=[0.0] * k,
        test_fraction=setup.test_fraction,
        seed=0,
        layout=setup.layout,  # type: ignore[arg-type]
    )


# ------------------------------------------------------------------------------ report


def _stats(job: WireDtypeJob, dataset: str, dtype: str) -> tuple[dict, list[dict[str, Any]]]:
    setup = setup_for(dataset, dtype, job.option)
    probe = simulation_config(setup, grid_runs(["laser"], [0.0], job.seeds[:1])[0])
    digest = setup_digest(setup, json.loads(probe.model_dump_json()))
    records = [r for r in load_runs(job.runs_dir, setup, digest) if r["run"]["seed"] in job.seeds]
    records = [r for r in records if r["run"]["method"] == "laser" and r["run"]["p_train"] == 0]
    # the digest of the reference setup ignores these options: keep the runs that match them
    wanted = {**REFERENCE, job.option: dtype}
    records = [r for r in records if _options_of(r) == wanted]
    return summarize(collect(records, setup.metric)), records


def write_report(job: WireDtypeJob) -> tuple[Path, str]:
    volume = read_json(job.results / BYTES_FILE) or {"rows": []}
    lines = [
        "# Embeddings and gradients on the wire: float32, float16, bfloat16, int8",
        "",
        "`--wire-dtype` (vfl_core/model/quantize.py) rounds what crosses the wire; parties and the "
        "coordinator compute in float32. float16: IEEE half (saturating at 65504, gradients "
        "below 6e-8 flush to zero); bfloat16: float32's upper 16 bits; int8: codes in "
        "[-127, 127] and one scale per row (max |row| / 127 rounded up to a power of two, sent "
        "as one exponent byte; before 2026-11-23 23:10 a 16-bit scale with 9 significant bits).",
        "",
        "Accuracy: LASER-VFL, the accuracy grid's setups (benchmarks/setups.py), train p_miss "
        f"0, test p_miss 0 / 0.1 / 0.5, seeds {', '.join(map(str, job.seeds))}; mean +- sample "
        "std over seeds. Each run is a `vfl simulate`-equivalent in-process run, which is bit "
        "for bit the real federation's result for the same wire dtype "
        "(tests/test_wire_dtype.py, tests/test_equivalence.py). `within noise`: the difference "
        "from float32 is at most float32's std over seeds (the accuracy reports' rule).",
        "",
        f"- Command: `{job.command}`",
        "",
    ]
    for dataset in job.datasets:
        lines += _accuracy_section(job, dataset)
    lines += _bytes_section(volume, job)
    path = job.results / "wire_dtype.md"
    text = "\n".join(lines) + "\n" + kept_notes(path, NOTES)
    path.write_text(text)
    return path, text


def accuracy_sections(job: WireDtypeJob) -> list[str]:
    """Accuracy by value of the job's option, per data set with cached runs ([] if none)."""
    out = []
    for dataset in job.datasets:
        if any(_stats(job, dataset, v)[1] for v in job.values):
            out += _accuracy_section(job, dataset)
    return out


def _accuracy_section(job: WireDtypeJob, dataset: str) -> list[str]:
    setup = SETUPS[dataset]
    reference = job.values[0]
    base, base_records = _stats(job, dataset, reference)
    body, seconds, codes = [], [], set()
    for dtype in job.dtypes:
        stats, records = _stats(job, dataset, dtype)
        seconds += [r["seconds"] for r in records]
        codes |= {r.get("code", "?") for r in records}
        row = [dtype]
        for p in P_MISS:
            s, b = stats.get(("laser", 0.0, p)), base.get(("laser", 0.0, p))
            if s is None:
                row.append("-")
                continue
            cell = f"{s.mean:.2f} +- {s.std:.2f} (n={s.n})"
            if b is not None and dtype != reference:
                diff = s.mean - b.mean
                cell += f", {diff:+.2f} " + ("within noise" if abs(diff) <= b.std else "**beyond**")
            row.append(cell)
        body.append(row)
    loads = [r.get("load_average", [0])[0] for r in base_records]
    return [
        f"## {dataset}: {metric_label(setup)}, by {job.option.replace('_', ' ')}",
        "",
        setup.notes,
        "",
        *md_table([job.option.replace("_", " "), *(f"test p_miss {p:g}" for p in P_MISS)], body),
        "",
        f"Runs: {len(seconds)}, {min(seconds, default=0) / 60:.0f}-"
        f"{max(seconds, default=0) / 60:.0f} min each, code {', '.join(sorted(codes))}; "
        f"load average at the end of the {reference} runs "
        + ", ".join(f"{x:.1f}" for x in loads)
        + ".",
        "",
    ]


def _bytes_section(volume: dict[str, Any], job: WireDtypeJob) -> list[str]:
    rows = volume["rows"]
    if not rows:
        return []
    base = {r["dataset"]: r["bytes_per_round"] for r in rows if r["dtype"] == "float32"}
    body = [
        [
            r["dataset"],
            r["dtype"],
            f"{r['batch']} x {r['embed_dim']}",
            f"{r['bytes_per_round'] / 1024:.1f}",
            f"{r['tensor_bytes_per_round'] / 1024:.1f}",
            f"{r['bytes_per_round'] / base[r['dataset']]:.3f}" if r["dataset"] in base else "-",
        ]
        for r in rows
    ]
    load = ", ".join(f"{x:.1f}" for x in volume["load_average"])
    return [
        "## Bytes per training round (real federation, audited)",
        "",
        "Serialized training requests and replies to and from the coordinator (the pipelined "
        "engine's Train calls, each a round's Backward with the next round's Embed, and Fuse), "
        "per round, over one epoch of the setup's training (K = 4, every party "
        "holds labels, nothing missing). `float payload`: the embedding and gradient bytes "
        "inside them (int8: codes and scales).",
        "",
        f"- Code {volume['code']}, finished {volume['finished']}, load average {load}.",
        "",
        *md_table(
            [
                "data set",
                "wire dtype",
                "batch x d",
                "KiB / round",
                "float payload KiB",
                "x float32",
            ],
            body,
        ),
        "",
    ]
