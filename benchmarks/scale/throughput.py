"""`vfl bench scale throughput`: training samples per second in-process and over gRPC on loopback,
and the bytes a training round sends against the minimum the algorithm needs.

Workload: LASER-VFL, K = 4 parties holding the four 14x14 quadrants of a subset of MNIST-10k,
nothing missing (every batch has all four blocks, every party holds labels), MLP or CNN parties,
batch 128 or 1024. For each setting the two transports run side by side in one invocation: the
in-process federation (`InProcessTransport`, this process, one torch thread) and the real one
(`vfl-coordinator` + 4 `vfl-client` processes on 127.0.0.1, one torch thread each). Each run trains
`warmup + repeats` epochs; the throughput is the median over the repeated epochs of train samples
/ epoch seconds (the engine's own epoch timer). Bytes come from a separate audited gRPC run of
one epoch (`vfl-coordinator --audit-log`, which records every serialized message to and from the
coordinator), so the audit's cost never enters the timings.

Minimum traffic of a round with m observed blocks and H head parties among them: every head needs
the other m-1 embeddings and sends a gradient back to each of them, so 2 * H * (m-1) tensors of
B x d float32 if parties exchanged them directly. The coordinator relays: it receives m
embeddings, forwards H * (m-1), receives H * (m-1) gradients and returns m summed ones.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import Message

from benchmarks import procs
from benchmarks.pool import invocation, write_json
from benchmarks.setups import kept_notes, md_table

log = logging.getLogger(__name__)

K = 4
EMBED_DIM = 32
MODELS: dict[str, dict[str, Any]] = {
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
            "model": MODELS[model],
            **({"staleness": staleness} if staleness else {}),
        }


def prepare(job: ThroughputJob, out: Path) -> list[Path]:
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
        num_blocks=K,
        p_miss_train=[0.0] * K,
        p_miss_test=[0.0] * K,
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


def minimum_bytes(samples: int, heads: int = K, blocks: int = K) -> dict[str, int]:
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


def run(job: ThroughputJob) -> dict[str, Any]:
    """Every (model, batch) setting, both transports side by side; writes throughput.json/.md."""
    from tqdm import tqdm

    settings = [(m, b, s) for m in job.models for b in job.batch_sizes for s in job.staleness]
    rows = []
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="vfl-throughput-") as tmp_dir:
        tmp = Path(tmp_dir)
        data = prepare(job, tmp / "data")
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


def write_report(record: dict[str, Any], results: Path) -> tuple[Path, str]:
    m, job = record["machine"], record["job"]
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
        f"LASER-VFL, K = {K} parties (MNIST-10k quadrants, {job['train_samples']} train images, "
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
        f"(m + H(m-1) embeddings and H(m-1) + m gradients; {K + K * (K - 1)} x 2 = "
        f"{2 * (K + K * (K - 1))} tensors of B x d float32 here). `minimum, direct`: each "
        f"embedding and gradient sent once to each party that needs it (2H(m-1) = "
        f"{2 * K * (K - 1)} tensors). `ratio` = sent / direct minimum.",
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
