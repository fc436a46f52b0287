"""`vfl bench wan`: epoch time and accuracy of the real federation over shaped links.

Every party reaches the coordinator over its own `netshape.Link` (benchmarks/netshape.py): the
coordinator dials the party's server through one port of the link (the client advertises it),
the party registers and heartbeats through another, and both connections share the link's two
directions, each with half the round-trip time as delay, the bandwidth and the jitter. The
processes are the real ones (`vfl-coordinator` and K `vfl-client`s on 127.0.0.1, plaintext,
hmac alignment as in benchmarks/procs.py).

For each workload (data set and party model), variant (extra coordinator options, e.g. a wire
dtype) and link setting, a run trains `epochs` epochs; the epoch time is the median of the
engine's own epoch timer over the epochs after `warmup`. Once the last epoch is logged the links
are reshaped to no delay, so the test evaluation (15 subsets of parties) does not take minutes;
the accuracy is that evaluation's. Bytes per round are what the links carried between the end of
the first and of the last epoch, over the rounds in between.

Results of one invocation go to `<results>/wan-<label>.json`; `wan.md` is written from every
such file in the directory, so a "before" and an "after" invocation sit side by side (each with
its own command, code version and load; only ratios within one invocation are comparable).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import procs
from benchmarks.netshape import HOST, NetShaper, Shape, free_port
from benchmarks.pool import invocation, read_json, write_json
from benchmarks.setups import SETUPS, kept_notes, md_table

log = logging.getLogger(__name__)

K = 4
BATCH = 128
NOTES = "## Reading"  # a hand-written section a rewrite of the report keeps


@dataclass(frozen=True)
class Workload:
    dataset: str
    layout: str
    train: dict[str, Any]  # TrainConfig fields except seed and epochs
    metric: str  # the headline metric of the data set: "f1" or "accuracy"


_MNIST_TRAIN = {"batch_size": BATCH, "lr": 1e-3, "weight_decay": 1e-4}
WORKLOADS: dict[str, Workload] = {
    # the paper's Credit setup (benchmarks/setups.py) at batch 128
    "credit-mlp": Workload(
        "credit",
        "auto",
        {k: v for k, v in SETUPS["credit"].train.items() if k != "epochs"},
        "f1",
    ),
    # the throughput benchmark's MLP parties: 196 -> 128 -> 32
    "mnist-mlp": Workload(
        "mnist",
        "quadrants",
        {**_MNIST_TRAIN, "model": {"representation": "mlp", "hidden": (128,), "embed_dim": 32}},
        "accuracy",
    ),
    # the MNIST grid's small CNN
    "mnist-cnn": Workload(
        "mnist",
        "quadrants",
        {**_MNIST_TRAIN, "model": {"representation": "cnn", "hidden": (64,), "embed_dim": 32}},
        "accuracy",
    ),
}
# Extra vfl-coordinator options of each variant ("default": whatever the code's defaults are).
VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "sequential": ("--no-pipeline",),  # Embed, Fuse, Backward: three round trips per round
    "pipelined": (),  # exact pipelining, the default since it exists: two
    "stale3": ("--staleness", "3"),
    "stale7": ("--staleness", "7"),
    "stale15": ("--staleness", "15"),
    "int8": ("--wire-dtype", "int8"),
    "stale7-int8": ("--staleness", "7", "--wire-dtype", "int8"),
    # embeddings and gradients party to party (docs/data-plane.md): one round trip per round
    "direct": ("--data-plane", "direct"),
}


@dataclass(frozen=True)
class WanJob:
    results: Path
    data_path: Path
    label: str = "default"
    workloads: Sequence[str] = ("mnist-mlp", "mnist-cnn", "credit-mlp")
    variants: Sequence[str] = ("default",)
    rtts_ms: Sequence[float] = (0.0, 10.0, 50.0, 100.0)
    mbits: Sequence[float] = (1000.0, 100.0)
    jitter_ms: float = 0.0
    epochs: int = 3
    warmup: int = 1
    seed: int = 0
    command: str = ""

    def train(self, workload: str) -> dict[str, Any]:
        return {**WORKLOADS[workload].train, "seed": self.seed, "epochs": self.epochs}


def prepare(workload: Workload, data_path: Path, seed: int, out: Path) -> list[Path]:
    """K party directories of the whole data set, 20% test, nothing missing."""
    from vfl_core.data.datasets import load_dataset
    from vfl_core.data.prepare import prepare_parties

    return prepare_parties(
        load_dataset(workload.dataset, data_path),
        out,
        num_blocks=K,
        p_miss_train=[0.0] * K,
        p_miss_test=[0.0] * K,
        test_fraction=0.2,
        seed=seed,
        layout=workload.layout,  # type: ignore[arg-type]
    )


def run_one(
    job: WanJob, workload: str, variant: str, rtt: float, mbit: float, dirs: list[Path], tmp: Path
) -> dict[str, Any]:
    """One federation over shaped links; its epoch times, accuracy and bytes per round."""
    shape = Shape.of(rtt, mbit, job.jitter_ms)
    args = [*procs.train_args(job.train(workload)), "--deadline", "300", *VARIANTS[variant]]
    workdir = tmp / f"{workload}-{variant}-rtt{rtt:g}-{mbit:g}"
    load = os.getloadavg()[0]
    with NetShaper() as net:

        def network(k: int, coordinator_port: int) -> list[str]:
            link = net.link(shape, seed=k)
            party_port = free_port()
            via = net.listen(link, (HOST, party_port))  # the coordinator dials the party
            up = net.listen(link, (HOST, coordinator_port), reverse=True)  # the party registers
            return [
                "--coordinator", f"{HOST}:{up}",
                "--listen", f"{HOST}:{party_port}",
                "--advertise", f"{HOST}:{via}",
            ]  # fmt: skip

        # the links' bytes at the end of each epoch; no delay for the (untimed) evaluation
        watcher = procs.EpochWatch(net.bytes, job.epochs, lambda: net.set_shape(Shape()))
        with procs.federation(dirs, workdir, args, network) as out:
            watcher.start(out)
        watcher.stop()
    results = procs.results(out)
    short = _short_rounds(out)
    if short:
        log.warning(
            "wan %s %s RTT %g: %d rounds without every party", workload, variant, rtt, short
        )
    epochs = results["epochs"]
    seconds = [e["seconds"] for e in epochs]
    rounds = [e["rounds"] for e in epochs]
    overall = next(r for r in results["test"]["rows"] if r["observed"] == "all")
    return {
        "workload": workload,
        "variant": variant,
        "rtt_ms": rtt,
        "mbit": mbit,
        "jitter_ms": job.jitter_ms,
        "epoch_seconds": seconds,
        "median_epoch_s": statistics.median(seconds[job.warmup :]),
        "rounds_per_epoch": rounds[0],
        "accuracy": overall.get("accuracy"),
        "f1": overall.get("f1"),
        "bytes_per_round": watcher.per_round(rounds),
        "short_rounds": short,
        "load_average": [load, os.getloadavg()[0]],
    }


def _key(row: dict[str, Any]) -> tuple[str, str, float, float]:
    return row["workload"], row["variant"], row["mbit"], row["rtt_ms"]


def _resumed(path: Path, job_info: dict[str, Any]) -> dict[str, Any]:
    """The record of a stopped invocation of the same label and job (saved after every run),
    or an empty one."""
    found = read_json(path)
    if found is None or not found.get("partial") or found.get("job") != job_info:
        return {"rows": []}
    log.info("resuming %s: %d runs done", path, len(found["rows"]))
    return found


def _short_rounds(out: Path) -> int:
    """Training rounds in which some party did not take part or was not updated (a party that
    missed a deadline or failed): such a run did not measure the protocol's normal round."""
    short = 0
    for line in (out / "rounds.jsonl").read_text().splitlines():
        r = json.loads(line)
        short += len(r["present"]) < K or len(r["updated"]) < K
    return short


def run(job: WanJob, progress: bool = True) -> dict[str, Any]:
    """Every workload x variant x bandwidth x RTT; writes wan-<label>.json after every run
    (marked partial until the last), and resumes a stopped invocation of the same label."""
    from tqdm import tqdm

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    path = job.results / f"wan-{job.label}.json"
    job_info = {
        "epochs": job.epochs,
        "warmup": job.warmup,
        "seed": job.seed,
        "jitter_ms": job.jitter_ms,
        "variants": {v: list(VARIANTS[v]) for v in job.variants},
    }
    before = _resumed(path, job_info)
    rows = list(before["rows"])
    if rows:  # the whole invocation's time and its first load; a note stays
        started -= before["seconds"]
        load_before = before["load_average"][0]
    done = {_key(r) for r in rows}
    settings = [
        (w, v, mbit, rtt)
        for w in job.workloads
        for v in job.variants
        for mbit in job.mbits
        for rtt in job.rtts_ms
    ]
    record: dict[str, Any] = {"label": job.label, "job": job_info, "resumed": len(rows)}
    if before.get("note"):
        record["note"] = before["note"]
    with tempfile.TemporaryDirectory(prefix="vfl-wan-") as tmp_dir:
        tmp = Path(tmp_dir)
        data: dict[str, list[Path]] = {}
        for w, v, mbit, rtt in tqdm(settings, desc="wan", unit="run", disable=not progress):
            if (w, v, mbit, rtt) in done:
                continue
            if w not in data:
                data[w] = prepare(WORKLOADS[w], job.data_path, job.seed, tmp / "data" / w)
            log.info("wan %s %s: %g Mbit/s, RTT %g ms", w, v, mbit, rtt)
            rows.append(run_one(job, w, v, rtt, mbit, data[w], tmp))
            record.update(invocation(started, load_before, job.command), rows=rows, partial=True)
            write_json(path, record)
    order = {s: i for i, s in enumerate(settings)}
    rows.sort(key=lambda r: order.get(_key(r), len(order)))
    record.update(invocation(started, load_before, job.command), rows=rows, partial=False)
    write_json(path, record)
    return record


# ------------------------------------------------------------------------------ report


def records(results: Path) -> list[dict[str, Any]]:
    """Every wan-*.json in `results`, oldest first."""
    found = [read_json(p) for p in sorted(results.glob("wan-*.json"))]
    return sorted((r for r in found if r is not None), key=lambda r: r["finished"])


def record_section(record: dict[str, Any]) -> list[str]:
    m, job = record["machine"], record["job"]
    load = " and ".join(f"{x:.1f}" for x in record["load_average"])
    lines = [
        f"## `{record['label']}`: code {record['code']}, finished {record['finished']}",
        "",
        f"- Command: `{record['command']}`",
        f"- {job['epochs']} epochs per run, the first {job['warmup']} not timed; seed "
        f"{job['seed']}; jitter {job['jitter_ms']:g} ms; variants: "
        + ", ".join(
            f"`{v}` ({' '.join(a) or 'no extra options'})" for v, a in job["variants"].items()
        ),
        *([f"- Note: {record['note']}"] if record.get("note") else []),
        *(
            [f"- Resumed after a stop: {record['resumed']} runs come from the stopped invocation."]
            if record.get("resumed")
            else []
        ),
        *(["- **Partial**: the invocation has not finished."] if record.get("partial") else []),
        f"- Machine: {m.get('cores')}-core CPU, torch {m.get('torch')}; "
        f"{record['seconds'] / 60:.0f} min in all; 1-minute load average {load} at start and "
        "end (other people's jobs share the cores, so compare only within this section).",
        "",
    ]
    for workload in dict.fromkeys(r["workload"] for r in record["rows"]):
        for variant in dict.fromkeys(r["variant"] for r in record["rows"]):
            rows = [
                r for r in record["rows"] if r["workload"] == workload and r["variant"] == variant
            ]
            if rows:
                lines += [f"### {workload}, `{variant}`", "", *_table(rows), ""]
    return lines


def _table(rows: list[dict[str, Any]]) -> list[str]:
    metric = WORKLOADS[rows[0]["workload"]].metric
    base = {r["mbit"]: r for r in rows if r["rtt_ms"] == 0}
    body = []
    for r in rows:
        zero = base.get(r["mbit"])
        ratio = r["median_epoch_s"] / zero["median_epoch_s"] if zero else float("nan")
        per_round = _ms_per_round(r)
        value = r.get(metric)
        body.append(
            [
                f"{r['mbit']:g}",
                f"{r['rtt_ms']:g}",
                f"{r['median_epoch_s']:.1f}",
                f"{ratio:.2f}",
                f"{per_round:.1f}",
                f"{per_round - _ms_per_round(zero):+.1f}" if zero else "-",
                "-" if value is None else f"{100 * value:.2f}",
                "-" if r["bytes_per_round"] is None else f"{r['bytes_per_round'] / 1024:.0f}",
                " / ".join(f"{s:.1f}" for s in r["epoch_seconds"])
                + (
                    f" ({r['short_rounds']} rounds short of a party)"
                    if r.get("short_rounds")
                    else ""
                ),
            ]
        )
    return md_table(
        [
            "Mbit/s",
            "RTT ms",
            "epoch s (median)",
            "x RTT 0",
            "ms / round",
            "vs RTT 0",
            metric if metric == "accuracy" else "F1 x 100",
            "KiB / round",
            "every epoch s",
        ],
        body,
    )


def _ms_per_round(row: dict[str, Any]) -> float:
    return 1000 * row["median_epoch_s"] / row["rounds_per_epoch"]


def staleness_accuracy(results: Path) -> list[str]:
    """What bounded staleness costs in accuracy (`vfl bench staleness`), if it was run."""
    from benchmarks import wire_dtype

    job = wire_dtype.WireDtypeJob(
        results, Path("."), values=wire_dtype.OPTIONS["staleness"], option="staleness"
    )
    sections = wire_dtype.accuracy_sections(job)
    if not sections:
        return []
    return [
        "## What staleness costs in accuracy",
        "",
        "`--staleness S` changes the math (vfl_core/training/pipeline.py): "
        "an embedding may miss up to S "
        "of its party's earlier updates. LASER-VFL with the accuracy grid's setups, train "
        "p_miss 0, seeds 0-2, in process (bit for bit the real federation with the same option: "
        "tests/test_pipeline.py, tests/test_equivalence.py). Reproduce: "
        "`vfl bench staleness --data-path ../shared/data`. `within noise`: the difference from "
        "S = 0 is at most S = 0's std over seeds.",
        "",
        *sections,
    ]


def write_report(results: Path) -> tuple[Path, str]:
    from benchmarks.wan.tables import section as tables_section  # its tabular imports, when asked

    found = records(results)
    lines = [
        "# The federation over a WAN: epoch time against round-trip time and bandwidth",
        "",
        "K = 4 parties, each behind its own shaped link to the coordinator "
        "(benchmarks/netshape.py: an asyncio TCP proxy with a one-way delay of RTT/2, a "
        "bandwidth and a jitter per direction; this machine has no netem). Real processes "
        "(`vfl-coordinator`, 4 `vfl-client`s) on 127.0.0.1, plaintext, hmac alignment. "
        f"Batch {BATCH}, nothing missing, every party holds labels. Workloads: "
        "`mnist-mlp` (MNIST-10k quadrants, 8 000 train / 2 000 test, MLP 196 -> 128 -> 32), "
        "`mnist-cnn` (the same data, the MNIST grid's small CNN), `credit-mlp` (UCI Credit, "
        "24 000 / 6 000, the paper's MLP 5 -> 10 -> 10 -> 10, Adam lr 1e-4, class-balanced "
        "resampling). A CNN does not apply to Credit's 5 tabular columns per party.",
        "",
        "`epoch s` is the median of the engine's epoch timer over the timed epochs; `x RTT 0` "
        "divides it by the same workload, variant and bandwidth at RTT 0 in the same "
        "invocation; `vs RTT 0` is the difference in ms per round, the time the links add to a "
        "round, which depends less on the machine's load than the ratio (a loaded machine "
        "stretches the compute, and so the RTT 0 time the ratio divides by). The metric is the "
        "test evaluation after the last epoch (with the links reshaped to no delay: evaluation "
        "is not timed); it is an early-training figure, "
        "reported to show what each option costs, not the converged accuracy. `KiB / round`: "
        "bytes both ways over all four links per training round.",
        "",
        "Sections marked *tables to a model* (`vfl bench wan --tables ...`, "
        "benchmarks/wan/tables.py) measure instead what a user waits for: K = 3 parties of a "
        "table (labels at party 0, partial overlap, the party CSVs of `vfl bench tabular`), each "
        "behind its own link, trained to the model (with the defaults, early stopping and the "
        "restored best epoch). `rounds to the model` and `s to the model` run to the best "
        "epoch (wall time from the first epoch's start to the best epoch's validation; process "
        "start-up, alignment and the final test evaluation not counted), `s trained` to the "
        "last epoch (the epochs early stopping waits for included); `ms / round` is the "
        "engine's timer over the training rounds (validation not), and `vs RTT 0` what the "
        "links add to it, also in RTTs. Scores: the restored model on every test row. "
        "`MiB to the model`: the links' bytes per round (both ways, all links, validation "
        "included) times the rounds to the model. On the direct data plane a party's pushes "
        "cross the receiving party's link, so a feature party and a label party are one RTT "
        "apart.",
        "",
        "Reproduce: `vfl bench wan --data-path ../shared/data --label LABEL` (options in each "
        "section's command).",
        "",
    ]
    for record in found:
        tabled = record["job"].get("kind") == "tables"
        lines += tables_section(record) if tabled else record_section(record)
    lines += staleness_accuracy(results)
    path = results / "wan.md"
    text = "\n".join(lines) + "\n" + kept_notes(path, NOTES)
    path.write_text(text)
    return path, text
