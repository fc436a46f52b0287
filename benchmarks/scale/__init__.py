"""The scale suite. `vfl bench scale parties`: accuracy and time per epoch against the number of
parties K (paper Fig. 2); `vfl bench scale throughput`: at the end of this module.

MNIST-10k cut into K vertical strips (K = 2..8), every party missing 10% of the train and test
samples. Combinatorial trains one predictor per subset (2^K - 1; 255 at K = 8) and every party
computes a representation slot per subset containing it, so its cost grows exponentially in K;
the work is bounded by a random subset of the data and few epochs, both recorded in the report.
Each (method, K, seed) run is cached like the accuracy grid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import Message

from benchmarks import procs
from benchmarks.pool import Task, invocation, machine, read_json, run_tasks, write_json
from benchmarks.setups import METHOD_NAMES, SETUPS, kept_notes, md_table, pyplot

log = logging.getLogger(__name__)

METHODS: tuple[str, ...] = ("laser", "combinatorial", "ensemble", "plug")
# Per-strip models: "mlp" (default: cheap enough to train to a meaningful accuracy at K = 8 with
# 255 combinatorial predictors) and "cnn" (the MNIST grid's CNN; only a few steps fit).
MODELS: dict[str, dict[str, Any]] = {
    "mlp": {"representation": "mlp", "hidden": (128,), "embed_dim": 32},
    "cnn": SETUPS["mnist"].train["model"],
}
MODEL_TEXT = {
    "mlp": "MLP per strip (pixels -> 128 -> 32, ReLU)",
    "cnn": "the MNIST grid's small CNN per strip (embedding 32)",
}


@dataclass(frozen=True)
class ScalingJob:
    ks: Sequence[int]
    methods: Sequence[str]
    results: Path
    data_path: Path
    seed: int = 0
    epochs: int = 2
    max_train: int = 2000
    max_test: int = 1000
    p_miss: float = 0.1
    model: str = "mlp"
    jobs: int = 1
    command: str = ""

    @property
    def report_path(self) -> Path:
        name = "scaling.md" if self.model == "mlp" else f"scaling_{self.model}.md"
        return self.results / name

    def payload(self, method: str, k: int) -> dict[str, Any]:
        train = {**SETUPS["mnist"].train, "method": method, "seed": self.seed}
        train["model"] = MODELS[self.model]
        train["epochs"] = self.epochs
        return {
            "method": method,
            "clients": k,
            "seed": self.seed,
            "p_miss": self.p_miss,
            "max_train": self.max_train,
            "max_test": self.max_test,
            "data_path": str(self.data_path),
            "train": train,
        }

    def digest(self) -> str:
        probe = self.payload("laser", 0)
        for key in ("method", "clients", "data_path"):
            probe.pop(key)
        probe["train"].pop("method")
        return hashlib.sha256(json.dumps(probe, sort_keys=True).encode()).hexdigest()[:10]

    def tasks(self) -> list[Task]:
        digest = self.digest()
        return [
            Task(
                f"{m} K={k}",
                self.payload(m, k),
                self.results / "runs" / "scaling" / f"{m}-K{k}-seed{self.seed}-{digest}.json",
            )
            for k in self.ks
            for m in self.methods
        ]


def scaling_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Pool worker: prepare K strips of a subset of MNIST-10k, train, evaluate, time epochs."""
    from vfl_core.config import TrainConfig
    from vfl_core.simulate import SimulationConfig, run_simulation

    k = int(payload["clients"])
    train = TrainConfig.model_validate(payload["train"])
    with tempfile.TemporaryDirectory(prefix="vfl-scaling-") as tmp:
        dirs = _prepare_strips(payload, Path(tmp), k)
        config = SimulationConfig(party_dirs=tuple(dirs), clients=k, train=train)
        result = run_simulation(config, progress=False)
    report = result.reports[None]
    overall = report.overall()
    seconds = [e.seconds for e in result.epochs]
    return {
        "K": k,
        "method": train.method,
        "epoch_seconds": seconds,
        "seconds_per_epoch": float(np.median(seconds)),
        "rounds_per_epoch": result.epochs[0].rounds if result.epochs else 0,
        "accuracy": overall.accuracy,
        "test_samples": overall.samples,
        "predictors": sum(len(p.models.heads) for p in result.parties.values()),
        "representation_models": sum(len(p.models.reps) for p in result.parties.values()),
        "train_config": json.loads(train.model_dump_json()),
    }


def _prepare_strips(payload: dict[str, Any], out: Path, k: int) -> list[Path]:
    from vfl_core.data.datasets import Dataset, load_dataset
    from vfl_core.data.prepare import prepare_parties

    full = load_dataset("mnist", Path(payload["data_path"]))
    n_train, n_test = int(payload["max_train"]), int(payload["max_test"])
    gen = np.random.default_rng(int(payload["seed"]))
    keep = np.sort(gen.permutation(len(full))[: n_train + n_test])
    subset = Dataset(full.name, full.kind, full.x[keep], full.y[keep], full.ids[keep], 10)
    p = float(payload["p_miss"])
    return prepare_parties(
        subset,
        out,
        num_blocks=k,
        p_miss_train=[p] * k,
        p_miss_test=[p] * k,
        test_fraction=n_test / (n_train + n_test),
        seed=int(payload["seed"]),
        layout="strips",
    )


def run(job: ScalingJob, progress: bool = True) -> list[str]:
    meta = {"command": job.command}
    return run_tasks(
        scaling_worker, job.tasks(), job.jobs, desc="scaling", progress=progress, meta=meta
    )


def write_report(job: ScalingJob) -> tuple[Path, str]:
    records = {}
    for task in job.tasks():
        record = read_json(task.out)
        if record is not None:
            records[(record["method"], record["K"])] = record
    md = job.report_path
    png = _plot(records, job, md.with_suffix(".png"))
    text = _markdown(records, job, png.name if png else None)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    return md, text


# Why the two fits differ (2026-11-23, after the quiet re-run of the MLP table): the figures
# themselves are computed from the records above this paragraph.
READING = (
    "Time per epoch is rounds per epoch times time per round. The rounds grow with K alike for "
    "every method: batches are single-pattern (DESIGN.md, invariant 3), and with p_miss 0.1 more "
    "parties means more observed sets, each ending in a partial batch. So the time per round is "
    "the measure of a method's own cost. There Combinatorial roughly doubles with each extra "
    "party (2^K - 1 predictors, each with its own representation models), while LASER-VFL grows "
    "more slowly than K itself: every party embeds once, and its head trains on one sampled "
    "subset per size, at most K tasks. The in-process federation runs the K parties one after "
    "another; in a real federation each party does its own share, in parallel with the others."
)

Records = dict[tuple[str, int], dict]
Cell = Callable[[dict, dict | None], str]  # (record at K, record at K-1 or None) -> text


def _markdown(records: Records, job: ScalingJob, plot: str | None) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    first = next(iter(records.values()), None)
    m = first["machine"] if first else machine()
    lines = [
        "# Scaling in the number of parties K (the paper's Figure 2)",
        "",
        f"MNIST-10k, a random subset of {job.max_train} train / {job.max_test} test images "
        f"(seed {job.seed}), cut into K vertical strips (28 x ~28/K pixels); every party misses "
        f"each train and test sample with p_miss {job.p_miss:g}. Models: "
        f"{MODEL_TEXT[job.model]}, linear head, Adam lr 1e-3, batch 64; {job.epochs} "
        "epochs per run, one run per cell (one seed). `—`: not run yet. "
        "`--model mlp` writes scaling.md, `--model cnn` scaling_cnn.md.",
        "",
        *(
            f"- Runs made by: `{c}`"
            for c in sorted({r.get("command", "?") for r in records.values()})
        ),
        f"- This report written by: `{job.command}`",
        f"- Written: {now}",
        f"- Machine: {m.get('cores')}-core CPU, {'a GPU' if m.get('gpu') else 'no GPU'}, torch "
        f"{m.get('torch')}, one torch thread per run; {_load_text(records)}",
        "",
        "## Time per training epoch (seconds, median over the run's epochs)",
        "",
        *_per_k_table(records, job, lambda r, _: f"{r['seconds_per_epoch']:.1f}", " s/epoch"),
        "",
        "## Growth of the time per epoch from K-1 to K",
        "",
        *_per_k_table(records, job, _growth),
        "",
        "## Time per training round (milliseconds: time per epoch / rounds per epoch)",
        "",
        "Batches are single-pattern, so an epoch has more rounds as K grows: more observed sets, "
        "each ending in a partial batch. The time per round is the algorithm's own cost; "
        "the in-process federation runs the K parties one after another within a round.",
        "",
        *_round_table(records, job),
        "",
        "## Test accuracy % (all test samples, after the run's epochs)",
        "",
        *_per_k_table(records, job, lambda r, _: f"{100 * r['accuracy']:.1f}"),
        "",
        "## Predictors (heads) across parties after training",
        "",
        *_per_k_table(records, job, lambda r, _: str(r["predictors"])),
        "",
    ]
    if plot:
        lines += [f"![scaling]({plot})", ""]
    lines += [*_verdict(records, job), "", READING]
    return "\n".join(lines) + "\n"


def _per_k_table(records: Records, job: ScalingJob, cell: Cell, suffix: str = "") -> list[str]:
    """A row per K, a column per method; `—` where the run (or its predecessor) is missing."""
    rows = []
    for k in job.ks:
        row = [str(k)]
        for method in job.methods:
            record = records.get((method, k))
            row.append("—" if record is None else cell(record, records.get((method, k - 1))))
        rows.append(row)
    return md_table(["K", *(f"{METHOD_NAMES[x]}{suffix}" for x in job.methods)], rows)


def _round_table(records: Records, job: ScalingJob) -> list[str]:
    """Rounds per epoch (per method where they differ) and milliseconds per round."""
    rows = []
    for k in job.ks:
        at_k = [records[(x, k)] for x in job.methods if (x, k) in records]
        counts = sorted({r["rounds_per_epoch"] for r in at_k if "rounds_per_epoch" in r})
        ms = [_ms_per_round(records.get((x, k))) for x in job.methods]
        rows.append([str(k), "/".join(map(str, counts)) or "—", *ms])
    header = ["K", "rounds/epoch", *(f"{METHOD_NAMES[x]} ms/round" for x in job.methods)]
    return md_table(header, rows)


def _per_round(record: dict) -> float:
    return record["seconds_per_epoch"] / max(record["rounds_per_epoch"], 1)


def _ms_per_round(record: dict | None) -> str:
    if record is None or "rounds_per_epoch" not in record:
        return "—"
    return f"{1000 * _per_round(record):.1f}"


def _verdict(records: Records, job: ScalingJob) -> list[str]:
    """Fit the time per epoch and per round against K, and compare LASER-VFL's growth with K's."""
    out = ["## Reading", ""]
    for method in ("combinatorial", "laser"):
        pts = [(k, records[(method, k)]) for k in job.ks if (method, k) in records]
        if len(pts) < 3:
            out.append(f"- {METHOD_NAMES[method]}: fewer than 3 K values recorded.")
            continue
        ks = np.array([k for k, _ in pts], float)
        epoch = np.array([r["seconds_per_epoch"] for _, r in pts], float)
        out.append(f"- {METHOD_NAMES[method]}, per epoch: {_fits(ks, epoch, 's')}.")
        if all("rounds_per_epoch" in r for _, r in pts):
            per_round = np.array([1000 * _per_round(r) for _, r in pts], float)
            out.append(
                f"- {METHOD_NAMES[method]}, per round: {_fits(ks, per_round, 'ms')}; "
                f"x{per_round[-1] / per_round[0]:.2f} from K={int(ks[0])} to K={int(ks[-1])} "
                f"while K grows x{ks[-1] / ks[0]:.2f}."
            )
    return out


def _fits(ks: np.ndarray, times: np.ndarray, unit: str) -> str:
    slope = np.polyfit(ks, np.log2(times), 1)[0]
    per_k = np.polyfit(ks, times, 1)[0]
    return (
        f"x{2**slope:.2f} per extra party (log-linear fit), +{per_k:.2f} {unit} per extra party "
        f"(linear fit), from {times[0]:.1f} {unit} at K={int(ks[0])} to {times[-1]:.1f} {unit} "
        f"at K={int(ks[-1])}"
    )


def _load_text(records: dict[tuple[str, int], dict]) -> str:
    """The machine's load while the runs ran, from what each run recorded at its end."""
    loads = [r["load_average"][0] for r in records.values() if "load_average" in r]
    codes = sorted({r["code"] for r in records.values() if "code" in r})
    if not loads:
        return (
            "the runs did not record the machine's load, so other work may have shared the cores "
            "(ratios between neighbours in K are what matter)."
        )
    unrecorded = len(records) - len(loads)
    return (
        f"1-minute load average at the end of each run {min(loads):.2f} to {max(loads):.2f} "
        f"(one run keeps one core busy"
        + (f"; {unrecorded} runs did not record it" if unrecorded else "")
        + f"); code {', '.join(codes) or 'not recorded'}."
    )


def _growth(record: dict, before: dict | None) -> str:
    if before is None:
        return "—"
    return f"x{record['seconds_per_epoch'] / before['seconds_per_epoch']:.2f}"


def _plot(records: dict[tuple[str, int], dict], job: ScalingJob, out: Path) -> Path | None:
    plt = pyplot()
    if plt is None or not records:
        return None
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(9, 3.8))
    for method in job.methods:
        ks = [k for k in job.ks if (method, k) in records]
        if not ks:
            continue
        name = METHOD_NAMES[method]
        ax_t.plot(ks, [records[(method, k)]["seconds_per_epoch"] for k in ks], "o-", label=name)
        ax_a.plot(ks, [100 * records[(method, k)]["accuracy"] for k in ks], "o-", label=name)
    ax_t.set_yscale("log")
    ax_t.set_xlabel("parties K")
    ax_t.set_ylabel("seconds per epoch (log)")
    ax_a.set_xlabel("parties K")
    ax_a.set_ylabel("test accuracy %")
    for ax in (ax_t, ax_a):
        ax.grid(alpha=0.3)
    ax_a.legend(fontsize=8)
    fig.suptitle(f"MNIST strips, p_miss {job.p_miss:g}, {job.max_train} train samples", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ------------------------------------------------------------------- vfl bench scale throughput
# `vfl bench scale throughput`: training samples per second in-process and over gRPC on loopback,
# and the bytes a training round sends against the minimum the algorithm needs.
#
# Workload: LASER-VFL, K = 4 parties holding the four 14x14 quadrants of a subset of MNIST-10k,
# nothing missing (every batch has all four blocks, every party holds labels), MLP or CNN parties,
# batch 128 or 1024. For each setting the two transports run side by side in one invocation: the
# in-process federation (`InProcessTransport`, this process, one torch thread) and the real one
# (`vfl-coordinator` + 4 `vfl-client` processes on 127.0.0.1, one torch thread each). Each run
# trains `warmup + repeats` epochs; the throughput is the median over the repeated epochs of
# train samples / epoch seconds (the engine's own epoch timer). Bytes come from a separate
# audited gRPC run of one epoch (`vfl-coordinator --audit-log`, which records every serialized
# message to and from the coordinator), so the audit's cost never enters the timings.
#
# Minimum traffic of a round with m observed blocks and H head parties among them: every head needs
# the other m-1 embeddings and sends a gradient back to each of them, so 2 * H * (m-1) tensors of
# B x d float32 if parties exchanged them directly. The coordinator relays: it receives m
# embeddings, forwards H * (m-1), receives H * (m-1) gradients and returns m summed ones.


THROUGHPUT_K = 4  # parties: the four quadrants
EMBED_DIM = 32
THROUGHPUT_MODELS: dict[str, dict[str, Any]] = {
    "mlp": {"representation": "mlp", "hidden": (128,), "embed_dim": EMBED_DIM},
    "cnn": {"representation": "cnn", "hidden": (64,), "embed_dim": EMBED_DIM},
}
TRAINING_RPCS = ("Embed", "Fuse", "Backward", "Train")


@dataclass(frozen=True)
class ThroughputJob:
    results: Path
    data_path: Path
    models: Sequence[str] = ("mlp", "cnn")
    batch_sizes: Sequence[int] = (128, 1024)
    train_samples: int = 8192
    warmup: int = 1
    repeats: int = 5
    seed: int = 0
    coordinator_args: tuple[str, ...] = ()  # e.g. ("--no-pipeline",): the engine compared
    # TrainConfig.staleness values, each measured on both transports (0: the exact engine)
    staleness: Sequence[int] = (0,)
    command: str = ""

    def train_config(
        self, model: str, batch: int, epochs: int, staleness: int = 0
    ) -> dict[str, Any]:
        return {
            "method": "laser",
            "seed": self.seed,
            "epochs": epochs,
            "batch_size": batch,
            "lr": 1e-3,
            "model": THROUGHPUT_MODELS[model],
            "staleness": staleness,  # 0 given: MNIST's exact rounds whatever the default
        }


def prepare_quadrants(job: ThroughputJob, out: Path) -> list[Path]:
    """Four quadrant parties of `train_samples` MNIST images (+ 256 test), nothing missing."""
    from vfl_core.data.datasets import Dataset, load_dataset
    from vfl_core.data.prepare import prepare_parties

    full = load_dataset("mnist", job.data_path)
    n_test = 256
    keep = np.sort(np.random.default_rng(job.seed).permutation(len(full)))
    keep = keep[: job.train_samples + n_test]
    subset = Dataset(full.name, full.kind, full.x[keep], full.y[keep], full.ids[keep], 10)
    return prepare_parties(
        subset,
        out,
        num_blocks=THROUGHPUT_K,
        p_miss_train=[0.0] * THROUGHPUT_K,
        p_miss_test=[0.0] * THROUGHPUT_K,
        test_fraction=n_test / len(keep),
        seed=job.seed,
        layout="quadrants",
    )


def in_process(dirs: Sequence[Path], train: dict[str, Any]) -> tuple[list[dict[str, Any]], list]:
    """Epoch summaries of the in-process federation (secret as the gRPC clients use), and this
    process's CPU seconds at the end of each epoch."""
    import torch

    from vfl_core.config import TrainConfig
    from vfl_core.simulate import SimulationConfig, run_simulation

    torch.set_num_threads(1)
    config = SimulationConfig(
        party_dirs=tuple(dirs), secret=procs.SECRET, train=TrainConfig.model_validate(train)
    )
    cpu: dict[int, float] = {}  # epoch -> CPU seconds after its last round so far

    def on_round(record: Any) -> None:
        cpu[record.epoch] = time.process_time()

    epochs = run_simulation(config, on_round=on_round).epochs
    return [e.__dict__ for e in epochs], [cpu[e] for e in sorted(cpu)]


def grpc_run(
    dirs: Sequence[Path],
    train: dict[str, Any],
    workdir: Path,
    audit: Path | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """results.json of a real federation run, with "cpu": the CPU seconds all its processes
    had used at the end of each epoch."""
    # nothing may be dropped for being slow on a loaded machine
    args = [*procs.train_args(train), "--deadline", "300", *extra]
    if audit is not None:
        args += ["--audit-log", str(audit)]
    pids: list[int] = []
    watch = procs.EpochWatch(lambda: procs.cpu_seconds(pids), train["epochs"])
    with procs.federation(dirs, workdir, args, pids=pids) as out:
        watch.start(out)
    watch.stop()
    return {**procs.results(out), "cpu": watch.marks}


def audited_bytes(audit: Path) -> dict[str, float]:
    """Bytes of the training phase's messages (Embed with train=True, Fuse, Backward; or the
    pipelined Train calls)."""
    from vfl_wire.audit import read_audit

    total, tensors, calls = 0, 0, 0
    training = False
    for record in read_audit(audit):
        if record.side != "client" or record.rpc not in TRAINING_RPCS:
            continue
        if record.direction == "error":
            continue
        message = record.message()
        if record.rpc == "Train" and record.direction == "request":
            training = True  # the pipelined engine's calls (vfl_core/training/pipeline.py)
        elif record.rpc == "Embed" and record.direction == "request":
            if not message.train and training:
                break  # evaluation starts: the training phase is over
            training = message.train
        if not training:
            continue
        total += len(record.data)
        tensors += _tensor_bytes(message)
        calls += record.direction == "request"
    return {"bytes": total, "tensor_bytes": tensors, "calls": calls}


def _tensor_bytes(message: Any) -> int:
    """Float payload (embeddings and gradients, with int8's scales) inside a message, nested
    messages included (a pipelined Train call carries Embed, Fuse and Backward requests)."""
    size = 0
    for field, value in message.ListFields():
        if field.name in ("embedding", "grad"):
            size += _payload(value)
        elif field.name in ("embeddings", "grads") and hasattr(value, "items"):  # block maps
            size += sum(_payload(t) for t in value.values())
        elif field.message_type is not None:
            nested = [value] if isinstance(value, Message) else value  # one or repeated
            size += sum(_tensor_bytes(m) for m in nested if isinstance(m, Message))
    return size


def _payload(tensor: Any) -> int:
    # stubs from before the wire dtypes have no `scales` (benchmarks run against old commits)
    return len(tensor.data) + len(getattr(tensor, "scales", b""))


def minimum_bytes(
    samples: int, heads: int = THROUGHPUT_K, blocks: int = THROUGHPUT_K
) -> dict[str, int]:
    """Tensor bytes of one epoch over `samples` rows with every block observed."""
    unit = samples * EMBED_DIM * 4
    return {
        "direct": 2 * heads * (blocks - 1) * unit,
        "relay": (blocks + heads * (blocks - 1)) * unit * 2,
    }


def measure(job: ThroughputJob, setting: tuple[str, int, int], data: list[Path], tmp: Path) -> dict:
    model, batch, staleness = setting
    epochs = job.warmup + job.repeats
    train = job.train_config(model, batch, epochs, staleness)
    name = f"{model}-{batch}-s{staleness}"
    log.info("throughput %s: in-process", name)
    local, local_cpu = in_process(data, train)
    log.info("throughput %s: gRPC", name)
    remote = grpc_run(data, train, tmp / name, extra=job.coordinator_args)
    audit = tmp / f"{name}.audit"
    audited = grpc_run(
        data,
        job.train_config(model, batch, 1, staleness),
        tmp / f"{name}-audit",
        audit,
        job.coordinator_args,
    )
    volume = audited_bytes(audit)
    rounds = audited["rounds"]
    n = job.train_samples
    return {
        "model": model,
        "batch": batch,
        "staleness": staleness,
        "train_samples": n,
        "in_process": _rates(local, n, job.warmup),
        "grpc": _rates(remote["epochs"], n, job.warmup),
        "cpu_ms_per_round": {
            "in_process": _cpu_per_round(local_cpu, local, job.warmup),
            "grpc": _cpu_per_round(remote["cpu"], remote["epochs"], job.warmup),
        },
        "rounds_per_epoch": rounds,
        "bytes_per_round": volume["bytes"] / rounds,
        "tensor_bytes_per_round": volume["tensor_bytes"] / rounds,
        "calls_per_round": volume["calls"] / rounds,
        "min_direct_per_round": minimum_bytes(n)["direct"] / rounds,
        "min_relay_per_round": minimum_bytes(n)["relay"] / rounds,
    }


def _cpu_per_round(cpu: list[float], epochs: list[dict[str, Any]], warmup: int) -> float | None:
    """CPU milliseconds per round over the measured epochs (after the warm-up)."""
    if len(cpu) <= warmup or warmup < 1:
        return None
    rounds = sum(e["rounds"] for e in epochs[warmup : len(cpu)])
    return 1000 * (cpu[-1] - cpu[warmup - 1]) / rounds


def _rates(epochs: list[dict[str, Any]], samples: int, warmup: int) -> dict[str, Any]:
    seconds = [e["seconds"] for e in epochs[warmup:]]
    rates = [samples / s for s in seconds]
    return {"epoch_seconds": seconds, "samples_per_s": statistics.median(rates), "rates": rates}


def run_throughput(job: ThroughputJob) -> dict[str, Any]:
    """Every (model, batch) setting, both transports side by side; writes throughput.json/.md."""
    from tqdm import tqdm

    settings = [(m, b, s) for m in job.models for b in job.batch_sizes for s in job.staleness]
    rows = []
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="vfl-throughput-") as tmp_dir:
        tmp = Path(tmp_dir)
        data = prepare_quadrants(job, tmp / "data")
        for setting in tqdm(settings, desc="throughput", unit="setting"):
            rows.append(measure(job, setting, data, tmp))
    record = {
        **invocation(started, load_before, job.command),
        "job": {
            "train_samples": job.train_samples,
            "warmup": job.warmup,
            "repeats": job.repeats,
            "seed": job.seed,
            "coordinator_args": list(job.coordinator_args),
        },
        "rows": rows,
    }
    write_json(job.results / "throughput.json", record)
    return record


def write_throughput_report(record: dict[str, Any], results: Path) -> tuple[Path, str]:
    m, job = record["machine"], record["job"]
    k = THROUGHPUT_K
    speed = [
        [
            _parties(r),
            str(r["batch"]),
            f"{r['in_process']['samples_per_s']:.0f}",
            f"{r['grpc']['samples_per_s']:.0f}",
            f"{r['grpc']['samples_per_s'] / r['in_process']['samples_per_s']:.2f}",
            " / ".join(f"{x:.0f}" for x in r["in_process"]["rates"]),
            " / ".join(f"{x:.0f}" for x in r["grpc"]["rates"]),
        ]
        for r in record["rows"]
    ]
    cpu = [
        [_parties(r), str(r["batch"]), *_cpu_cells(r.get("cpu_ms_per_round", {}))]
        for r in record["rows"]
    ]
    volume = [
        [
            _parties(r),
            str(r["batch"]),
            _kib(r["bytes_per_round"]),
            _kib(r["tensor_bytes_per_round"]),
            _kib(r["min_relay_per_round"]),
            _kib(r["min_direct_per_round"]),
            f"{r['bytes_per_round'] / r['min_direct_per_round']:.2f}",
            f"{r['calls_per_round']:.0f}",
        ]
        for r in record["rows"]
    ]
    lines = [
        "# Training throughput: in-process and gRPC on loopback",
        "",
        f"LASER-VFL, K = {k} parties (MNIST-10k quadrants, {job['train_samples']} train images, "
        f"nothing missing, all parties hold labels), embedding size {EMBED_DIM}; MLP parties: "
        "196 -> 128 -> 32; CNN parties: the MNIST grid's small CNN. One torch thread per "
        f"process. Each run trains {job['warmup']} warm-up + {job['repeats']} measured epochs; "
        "samples/s is the median over the measured epochs (train samples / the engine's epoch "
        "time). Both transports of a setting ran one after the other in the same invocation.",
        "",
        f"- Command: `{record['command']}`",
        f"- Finished: {record['finished']} ({record['seconds'] / 60:.1f} min)",
        f"- Machine: {m.get('cores')}-core CPU, {'a GPU' if m.get('gpu') else 'no GPU'}, "
        f"torch {m.get('torch')}, code {record.get('code', '?')}. The gRPC federation's 5 "
        f"processes share the {m.get('cores')} cores, so its 4 parties compute in parallel "
        "where the in-process federation runs them one after the other on one thread: that is "
        "why gRPC can be faster for the compute-bound CNN. Each client's compute thread runs "
        "on one torch thread since 6ae6ce6 (before it, MKL there used every core). The "
        "machine's other load was "
        "not controlled (1-minute load average "
        + " before, ".join(f"{x:.1f}" for x in record.get("load_average", []))
        + " after), so single epochs vary; the table lists every measured epoch.",
        *([f"- Note: {record['note']}"] if record.get("note") else []),
        "",
        "## Samples per second",
        "",
        *md_table(
            [
                "parties",
                "batch",
                "in-process",
                "gRPC",
                "gRPC / in-process",
                "in-process epochs",
                "gRPC epochs",
            ],
            speed,
        ),
        "",
        "## CPU per round",
        "",
        "CPU time (user + system) per training round over the measured epochs: of this "
        "process for the in-process federation, of all five processes (coordinator and four "
        "clients, from /proc) for gRPC. Unlike samples/s it hardly depends on what else runs on "
        "the machine: it is the work a round costs, where samples/s also reflects how much of "
        "the shared cores each side got.",
        "",
        *md_table(["parties", "batch", "in-process", "gRPC", "gRPC / in-process"], cpu),
        "",
        "## Bytes per training round (gRPC, audited)",
        "",
        "Sent and received by the coordinator in the training calls (the pipelined engine's "
        "Train, a round's Backward with the next round's Embed, and Fuse; Embed, Fuse and "
        "Backward with `--no-pipeline`), as serialized protobuf messages (requests and "
        "replies, from `--audit-log`), averaged over "
        "one epoch's rounds. In-process the same arrays are passed by reference: no bytes.",
        "",
        "`float payload`: the embedding and gradient tensors inside those messages. "
        "`minimum, relay`: the tensors the coordinator must receive and forward "
        f"(m + H(m-1) embeddings and H(m-1) + m gradients; {k + k * (k - 1)} x 2 = "
        f"{2 * (k + k * (k - 1))} tensors of B x d float32 here). `minimum, direct`: each "
        f"embedding and gradient sent once to each party that needs it (2H(m-1) = "
        f"{2 * k * (k - 1)} tensors). `ratio` = sent / direct minimum.",
        "",
        *md_table(
            [
                "parties",
                "batch",
                "sent",
                "float payload",
                "minimum, relay",
                "minimum, direct",
                "ratio",
                "calls",
            ],
            volume,
        ),
        "",
    ]
    path = results / "throughput.md"
    text = "\n".join(lines) + "\n" + kept_notes(path, NOTES)
    path.write_text(text)
    return path, text


NOTES = "## Where the time goes"  # a hand-written section a rewrite of the report keeps


def _parties(row: dict[str, Any]) -> str:
    """The parties' model, and the staleness where it is not the exact engine's 0."""
    s = row.get("staleness", 0)
    return row["model"].upper() + (f", --staleness {s}" if s else "")


def _cpu_cells(cpu: dict[str, float | None]) -> list[str]:
    local, remote = cpu.get("in_process"), cpu.get("grpc")
    if local is None or remote is None:
        return ["-", "-", "-"]
    return [f"{local:.1f} ms", f"{remote:.1f} ms", f"{remote / local:.2f}"]


def _kib(value: float) -> str:
    return f"{value / 1024:.1f} KiB"
