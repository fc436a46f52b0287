"""`vfl bench wan --tables`: what a user waits for, a table's model, over shaped links.

Per table (benchmarks.tabular.tables: UCI Credit and the census-like table, cut into K = 3 party
CSVs with the labels at party 0 and partial overlap exactly as `vfl bench tabular` cuts them:
benchmarks.tabular.tables.prepare), recipe (coordinator options, `RECIPES`), RTT and seed, one real
federation (`vfl-coordinator` and 3 `vfl-client --data partyK.csv`, options as
benchmarks.tabular.rows gives them) trains the way a user runs it: with the defaults, it
trains until early stopping and ends with the weights of its best epoch. Every party reaches the
coordinator over its own `netshape.Link` (one RTT and bandwidth for every link, as
benchmarks.wan sets them up); a party's advertised address is its link's port, so on the direct
data plane a push to a party crosses that party's link: a feature party and a label party are
one RTT apart, as each party and the coordinator are.

From outside the processes: a thread follows the coordinator's epochs.jsonl and notes the time
and the links' bytes as each epoch's line appears (after the epoch's validation scoring).
`to_model_s`, the wall time to the model, runs from the start of the first epoch (its line's time
less its own training seconds: its validation is the only piece not counted) to the line of the
best epoch, `rounds_s_to_model` the engine's timer of those epochs' training rounds (the rest is
each epoch's validation scoring and record); `trained_s` to the last epoch's line (the epochs
after the best that early stopping waits for included). Rounds come from the run record
(`trained_rounds`), the round time from the engine's epoch timer (training rounds only,
validation not), the scores from the test evaluation of the restored model (all test rows).
The centralised HistGradientBoosting row (no network) is `vfl bench tabular`'s
(benchmarks.tabular.rows.hgb_row).

wan.md's section of an invocation (`section`): per table, every recipe at every RTT (means over
the seeds run), the centralised HistGradientBoosting row, and the issue-43 acceptance checks
computed from the same rows.
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

from benchmarks import procs
from benchmarks.netshape import HOST, NetShaper, Shape, free_port
from benchmarks.pool import invocation, read_json, write_json
from benchmarks.setups import md_table
from benchmarks.tabular.rows import ISSUE43, ISSUE43_MODEL, hgb_row, table_client_args
from benchmarks.tabular.tables import Prepared, prepare, tables

log = logging.getLogger(__name__)

TABLES = ("credit", "census_like")
# Extra vfl-coordinator options of each recipe ("defaults": the code's own).
RECIPES: dict[str, tuple[str, ...]] = {
    # --data-plane auto: direct here (every party reaches the others), staleness 3 and the late
    # verdict (vfl_core.auto_rounds); the recipes below that name no staleness give 0 (exact)
    "defaults": (),
    "relay": ("--data-plane", "relay", "--staleness", "0"),  # the defaults before issue 43
    # the defaults' rounds through the coordinator (what the relay carries of the label
    # party's answers with its own tower exact)
    "defaults-relay": ("--data-plane", "relay"),
    "direct": ("--data-plane", "direct", "--staleness", "0"),
    # bounded staleness on the direct plane (vfl_core.training.direct_stale): rounds overlap
    # the network, the math of the pipelined relay's --staleness
    "direct-stale1": ("--data-plane", "direct", "--staleness", "1"),
    "direct-stale3": ("--data-plane", "direct", "--staleness", "3"),
    # the epoch end off the critical path (vfl_core.training.late_validation): epoch e's
    # validation scored while e + 1 trains, the verdict an epoch late
    "direct-overlap": ("--data-plane", "direct", "--staleness", "0", "--overlap-validation"),
    "direct-stale1-overlap": (
        "--data-plane", "direct", "--staleness", "1", "--overlap-validation",
    ),
    "direct-stale3-overlap": (
        "--data-plane", "direct", "--staleness", "3", "--overlap-validation",
    ),
    # the blocks run on across the epoch's end (vfl_core.training.direct_stale, --epoch-flow)
    "direct-stale3-flow": (
        "--data-plane", "direct", "--staleness", "3", "--overlap-validation", "--epoch-flow",
    ),
    # the same with half the bytes on the wire (each push's transfer at 100 Mbit/s halved)
    "direct-stale3-overlap-f16": (
        "--data-plane", "direct", "--staleness", "3", "--overlap-validation",
        "--wire-dtype", "float16",
    ),
    # the direct plane's largest staleness: blocks of 3 rounds, so in an epoch of about five
    # rounds no round waits for a gradient of the same epoch (only the epoch's end does)
    "direct-stale5-overlap": (
        "--data-plane", "direct", "--staleness", "5", "--overlap-validation",
    ),
    # and its blocks run on across the epoch's end (--epoch-flow): an epoch of about five
    # rounds is two blocks, one gradient round trip between the parties an epoch
    "direct-stale5-flow": (
        "--data-plane", "direct", "--staleness", "5", "--overlap-validation", "--epoch-flow",
    ),
    # the earlier defaults (staleness 3, the late verdict) with the label party's own tower
    # exact (embedded and stepped at its fuse)
    "fresh-own": ("--staleness", "3", "--overlap-validation", "--fresh-own-tower"),
    # ... with staleness 5 and the blocks running on across the epoch's end
    "fresh-own-s5-flow": (
        "--staleness", "5", "--overlap-validation", "--epoch-flow", "--fresh-own-tower",
    ),
    # the defaults issue 43 landed, as options of this code: the concatenating head weighted 1,
    # no linear lanes, torch's loop over the weights (the heads' blend is a candidate of the
    # choice here, after training; a 3-class task would watch the Brier score here, the
    # accuracy then: neither table is one)
    "issue43": ISSUE43,
    # ... and at torch's fused kernel, the defaults' (what the lanes and the heads cost alone)
    "issue43-fused": ISSUE43_MODEL,
    "local4": ("--local-steps", "4"),
    "local4-direct": ("--local-steps", "4", "--data-plane", "direct"),
    # a plain split network's recipe on the same towers: batch 256, constant Adam 1e-2,
    # 5 epochs, no early stopping (the model is the last epoch's), on the defaults' data plane
    "split-nn": (
        "--batch-size", "256", "--lr", "0.01", "--scheduler", "none", "--epochs", "5",
        "--early-stop-patience", "0", "--staleness", "0",
    ),
}  # fmt: skip
FIRST_RTTS = (0.0, 50.0)  # the cells the acceptance reads run first


@dataclass(frozen=True)
class TablesJob:
    results: Path
    data_path: Path
    label: str = "tables"
    tables: Sequence[str] = TABLES
    recipes: Sequence[str] = tuple(RECIPES)
    rtts_ms: Sequence[float] = (0.0, 10.0, 50.0, 100.0)
    mbit: float = 100.0
    seeds: Sequence[int] = (0,)
    max_minutes: float = 0.0  # 0: no limit; else no cell starts after this many minutes
    command: str = ""


Cell = tuple[str, str, float, int]  # table, recipe, RTT ms, seed


def cells(job: TablesJob) -> list[Cell]:
    """Every (table, recipe, RTT, seed), the ones that answer most first: the exact recipes at
    RTT 0 and 50, then local updates there, then the other RTTs (exact, then local); seed by
    seed, table by table within each stage."""

    def stage(recipe: str, rtt: float) -> int:
        local = recipe.startswith("local")
        return (0 if rtt in FIRST_RTTS else 2) + local

    found = [
        (t, r, rtt, s) for s in job.seeds for t in job.tables for rtt in job.rtts_ms
        for r in job.recipes
    ]  # fmt: skip
    return sorted(found, key=lambda c: stage(c[1], c[2]))  # stable: the order above within


def summarise(
    results: dict[str, Any],
    times: list[float],
    sent: list[int],
    span: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """A run's figures from its run record and the epoch marks (module docstring); `span`: the
    federation's start (processes launched) and end (every process exited), for where the rest
    of the run's time went."""
    epochs = results["epochs"]
    rounds = [e.get("trained_rounds", e["rounds"]) for e in epochs]
    seconds = [e["seconds"] for e in epochs]
    stop = results.get("early_stop") or {}
    best = stop.get("best_epoch") or len(epochs)  # 1-based; no early stopping: the last
    start = times[0] - seconds[0]
    per_round_bytes = (
        (sent[-1] - sent[0]) / sum(rounds[1:]) if len(sent) > 1 and sum(rounds[1:]) else None
    )
    overall = next(r for r in results["test"]["rows"] if r["observed"] == "all")
    return {
        "epochs": len(epochs),
        "best_epoch": best,
        "stopped_epoch": stop.get("stopped_epoch"),  # None: ran to the ceiling (--epochs)
        "rounds_to_model": sum(rounds[:best]),
        "rounds": sum(rounds),
        "to_model_s": times[best - 1] - start,
        "rounds_s_to_model": sum(seconds[:best]),  # the rest: validation and epoch ends
        "trained_s": times[-1] - start,
        "ms_per_round": 1000 * sum(seconds) / sum(rounds),
        "bytes_per_round": per_round_bytes,
        "bytes_to_model": None if per_round_bytes is None else per_round_bytes * sum(rounds[:best]),
        "batch_size": results["config"]["train"].get("batch_size"),
        "scores": {k: overall.get(k) for k in ("accuracy", "f1", "auc")},
        # where the run's time went: start-up, registration and alignment until the first
        # epoch's rounds; every epoch's rounds (the engine's timer); the epochs' ends
        # (validation, keeping the best state, records); after the last epoch's line (restoring
        # the best epoch, the subset and threshold choice, the test evaluation, shutdown)
        "setup_s": None if span is None else start - span[0],
        "rounds_s": sum(seconds),
        "boundaries_s": times[-1] - start - sum(seconds),
        "final_s": None if span is None else span[1] - times[-1],
        # what a user waits for: the processes launched to every one exited, the model
        # restored, chosen, tested and written (results.json)
        "wall_s": None if span is None else span[1] - span[0],
    }


def run_one(job: TablesJob, prep: Prepared, cell: Cell, tmp: Path) -> dict[str, Any]:
    """One federation of a table's parties over shaped links, trained to its model."""
    table, recipe, rtt, seed = cell
    shape = Shape.of(rtt, job.mbit)
    args = ["--seed", str(seed), "--deadline", "300", *RECIPES[recipe]]
    workdir = tmp / f"{table}-{recipe}-rtt{rtt:g}-s{seed}"
    load = os.getloadavg()[0]
    began = time.perf_counter()
    with NetShaper() as net:

        def network(k: int, coordinator_port: int) -> list[str]:
            link = net.link(shape, seed=k)
            party_port = free_port()
            via = net.listen(link, (HOST, party_port))  # the coordinator and peers dial it
            up = net.listen(link, (HOST, coordinator_port), reverse=True)  # it registers
            return [
                "--coordinator", f"{HOST}:{up}", "--listen", f"{HOST}:{party_port}",
                "--advertise", f"{HOST}:{via}", *table_client_args(prep, k),
            ]  # fmt: skip

        # the time and the links' bytes as each epoch is logged
        marks = procs.EpochWatch(lambda: (time.perf_counter(), net.bytes()))
        launched = time.perf_counter()
        with procs.federation(prep.split.paths, workdir, args, network) as out:
            marks.start(out)
        ended = time.perf_counter()
        marks.stop()
        total_bytes = net.bytes()
    times, sent = [m[0] for m in marks.marks], [m[1] for m in marks.marks]
    figures = summarise(procs.results(out), times, sent, (launched, ended))
    return {
        "table": table,
        "recipe": recipe,
        "rtt_ms": rtt,
        "seed": seed,
        "mbit": job.mbit,
        **figures,
        "run_s": time.perf_counter() - began,
        "run_bytes": total_bytes,
        "load_average": [load, os.getloadavg()[0]],
    }


def _hgb(prep: Prepared, table: str, seed: int) -> dict[str, Any]:
    row = hgb_row(prep)
    overall = row["scores"]["all"]
    return {
        "table": table,
        "seed": seed,
        "fit_s": row["seconds"],
        "scores": {k: overall.get(k) for k in ("accuracy", "f1", "auc")},
    }


def run(job: TablesJob, progress: bool = True) -> dict[str, Any]:
    """Every cell in `cells` order; wan-<label>.json after each (partial until the end), resuming
    a stopped invocation of the same label and job; cells not started within `max_minutes` are
    listed in the record as not run."""
    from tqdm import tqdm

    started, load_before = time.perf_counter(), os.getloadavg()[0]
    path = job.results / f"wan-{job.label}.json"
    info = {
        "kind": "tables",
        "mbit": job.mbit,
        "recipes": {r: list(RECIPES[r]) for r in job.recipes},
    }
    found = read_json(path)
    old = found if found and found.get("partial") and found.get("job") == info else {}
    rows, hgb = list(old.get("rows", [])), list(old.get("hgb", []))
    if old:
        started -= old["seconds"]
        load_before = old["load_average"][0]
    done = {(r["table"], r["recipe"], r["rtt_ms"], r["seed"]) for r in rows}
    todo = [c for c in cells(job) if c not in done]
    record: dict[str, Any] = {"label": job.label, "job": info, "resumed": len(rows)}
    loaders = tables(job.data_path, quick=False)
    not_run: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="vfl-wan-tables-") as tmp_dir:
        tmp = Path(tmp_dir)
        prepared: dict[tuple[str, int], Prepared] = {}
        for cell in tqdm(todo, desc="wan tables", unit="run", disable=not progress):
            table, _, _, seed = cell
            if job.max_minutes and time.perf_counter() - started > 60 * job.max_minutes:
                not_run.append(cell)
                continue
            if (table, seed) not in prepared:
                prep = prepare(loaders[table](seed, False), seed, tmp / f"data-{table}-s{seed}")
                prepared[table, seed] = prep
                if not any(h["table"] == table and h["seed"] == seed for h in hgb):
                    hgb.append(_hgb(prep, table, seed))
            log.info("wan tables %s %s RTT %g ms seed %d", *cell)
            rows.append(run_one(job, prepared[table, seed], cell, tmp))
            record.update(invocation(started, load_before, job.command), rows=rows, hgb=hgb)
            write_json(path, {**record, "partial": True})
    record.update(invocation(started, load_before, job.command), rows=rows, hgb=hgb)
    record.update(partial=False, not_run=[list(c) for c in not_run])
    write_json(path, record)
    return record


# wan.md's section of an invocation
Row = dict[str, Any]
FIELDS = (
    "rounds_to_model", "best_epoch", "epochs", "to_model_s", "rounds_s_to_model", "trained_s",
    "ms_per_round",
    "bytes_to_model", "setup_s", "rounds_s", "boundaries_s", "final_s", "wall_s",
)  # fmt: skip
SCORES = ("accuracy", "f1", "auc")
RATIO_AT_50 = 1.5  # time to the model at RTT 50 against RTT 0, with defaults
RTT_PER_ROUND = 1.2  # what the direct plane's exact round may add per RTT


def aggregate(rows: Sequence[Row]) -> dict[tuple[str, str, float], Row]:
    """(table, recipe, RTT) -> the means over its seeds of FIELDS and the scores, with `seeds`."""
    groups: dict[tuple[str, str, float], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["table"], r["recipe"], float(r["rtt_ms"])), []).append(r)
    out = {}
    for key, group in groups.items():
        mean: Row = {"seeds": len(group)}
        for name in FIELDS:
            values = [r[name] for r in group if r.get(name) is not None]
            mean[name] = statistics.fmean(values) if values else None
        for name in SCORES:
            values = [r["scores"][name] for r in group if r["scores"].get(name) is not None]
            mean[name] = statistics.fmean(values) if values else None
        out[key] = mean
    return out


def rtts_per_round(cell: Row, zero: Row | None, rtt: float) -> float | None:
    """What the links add to a training round, in RTTs: (ms / round - RTT 0's) / RTT."""
    if zero is None or rtt <= 0:
        return None
    return (cell["ms_per_round"] - zero["ms_per_round"]) / rtt


def checks(means: dict[tuple[str, str, float], Row], table: str) -> list[str]:
    """The acceptance of issue 43 on one table, each line `holds` or `does not hold` with the
    figures it reads; a check whose cells were not run says so."""
    lines = []
    ran = dict.fromkeys(r for t, r, _ in means if t == table and r != "split-nn")
    for recipe in dict.fromkeys(("defaults", "direct", *ran)):
        zero, at50 = means.get((table, recipe, 0.0)), means.get((table, recipe, 50.0))
        if zero is None or at50 is None:
            lines.append(f"- `{recipe}`: RTT 0 or 50 not run")
            continue
        ratio = at50["to_model_s"] / zero["to_model_s"]
        lines.append(
            f"- `{recipe}`: time to the model at RTT 50 is {ratio:.2f}x RTT 0's "
            f"({at50['to_model_s']:.1f} s against {zero['to_model_s']:.1f} s; at most "
            f"{RATIO_AT_50:g}x: {_verdict(ratio <= RATIO_AT_50)})"
        )
        plain = means.get((table, "split-nn", 50.0))
        if plain is not None:
            faster = at50["to_model_s"] <= plain["to_model_s"]
            lines.append(
                f"- `{recipe}` against `split-nn` at RTT 50: {at50['to_model_s']:.1f} s against "
                f"{plain['to_model_s']:.1f} s (at most: {_verdict(faster)}); accuracy "
                f"{_pct(at50['accuracy'])} against {_pct(plain['accuracy'])}, F1 "
                f"{_pct(at50['f1'])} against {_pct(plain['f1'])}, AUC {_num(at50['auc'])} "
                f"against {_num(plain['auc'])}"
            )
    # the direct plane's exact round: `direct`, and `defaults` where auto chose direct
    for (t, recipe, rtt), cell in sorted(means.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if t != table or recipe not in ("defaults", "direct") or rtt <= 0:
            continue
        added = rtts_per_round(cell, means.get((table, recipe, 0.0)), rtt)
        if added is not None:
            lines.append(
                f"- `{recipe}` at RTT {rtt:g}: a round takes {cell['ms_per_round']:.1f} ms, "
                f"{added:.2f} RTT more than at RTT 0 (at most {RTT_PER_ROUND:g}: "
                f"{_verdict(added <= RTT_PER_ROUND)})"
            )
    return lines


def section(record: dict[str, Any]) -> list[str]:
    m, job = record["machine"], record["job"]
    load = " and ".join(f"{x:.1f}" for x in record["load_average"])
    seeds = sorted({r["seed"] for r in record["rows"]})
    lines = [
        f"## `{record['label']}` (tables to a model): code {record['code']}, finished "
        f"{record['finished']}",
        "",
        f"- Command: `{record['command']}`",
        f"- {job['mbit']:g} Mbit/s on every link; seeds {', '.join(map(str, seeds))}; recipes: "
        + ", ".join(f"`{r}` ({' '.join(a) or 'the defaults'})" for r, a in job["recipes"].items()),
        *(["- **Partial**: the invocation has not finished."] if record.get("partial") else []),
        *(
            [
                "- Not run within the invocation's time limit: "
                + ", ".join(f"{t} `{r}` RTT {rtt:g} seed {s}" for t, r, rtt, s in record["not_run"])
            ]
            if record.get("not_run")
            else []
        ),
        f"- Machine: {m.get('cores')}-core CPU, torch {m.get('torch')}; "
        f"{record['seconds'] / 60:.0f} min in all; 1-minute load average {load} at start and "
        "end (other people's jobs share the cores: wall times are loaded-machine figures, "
        "compare only within this section).",
        "",
    ]
    means = aggregate(record["rows"])
    for table in dict.fromkeys(r["table"] for r in record["rows"]):
        lines += [f"### {table}", "", *_table(means, table, record.get("hgb", [])), ""]
        if any(c.get("setup_s") is not None for (t, _, _), c in means.items() if t == table):
            lines += ["Where the run's time went (s):", "", *_phases(means, table), ""]
        lines += ["Acceptance (issue 43), from the rows above:", "", *checks(means, table), ""]
    return lines


def _table(means: dict[tuple[str, str, float], Row], table: str, hgb: list[Row]) -> list[str]:
    body = []
    for (t, recipe, rtt), cell in means.items():
        if t != table:
            continue
        zero = means.get((t, recipe, 0.0))
        ratio = cell["to_model_s"] / zero["to_model_s"] if zero else None
        added = rtts_per_round(cell, zero, rtt)
        extra = cell["ms_per_round"] - zero["ms_per_round"] if zero and rtt > 0 else None
        body.append(
            [
                f"`{recipe}`",
                f"{rtt:g}",
                f"{cell['rounds_to_model']:.0f}",
                f"{cell['best_epoch']:.0f} / {cell['epochs']:.0f}",
                f"{cell['to_model_s']:.1f}",
                "-" if ratio is None else f"{ratio:.2f}",
                _num1(cell.get("rounds_s_to_model")),
                f"{cell['trained_s']:.1f}",
                f"{cell['ms_per_round']:.1f}",
                "-" if extra is None else f"{extra:+.1f} ({added:.2f} RTT)",
                _pct(cell["accuracy"]),
                _pct(cell["f1"]),
                _num(cell["auc"]),
                "-" if cell["bytes_to_model"] is None else f"{cell['bytes_to_model'] / 2**20:.1f}",
            ]
        )
    for h in (h for h in hgb if h["table"] == table):
        s = h["scores"]
        scores = [_pct(s.get("accuracy")), _pct(s.get("f1")), _num(s.get("auc"))]
        body.append(["HistGradientBoosting (central)", "-", "-", "-", f"{h['fit_s']:.1f}"])
        body[-1] += ["-"] * 5 + [*scores, "-"]
    return md_table(
        [
            "recipe",
            "RTT ms",
            "rounds to the model",
            "best / epochs",
            "s to the model",
            "x RTT 0",
            "of which rounds s",
            "s trained",
            "ms / round",
            "vs RTT 0 ms / round",
            "accuracy %",
            "F1 x 100",
            "AUC",
            "MiB to the model",
        ],
        body,
    )


def _phases(means: dict[tuple[str, str, float], Row], table: str) -> list[str]:
    """Per recipe and RTT: start-up and alignment, the training rounds (all epochs), the
    epochs' ends (validation, keeping the best state), after the last epoch (restoring the best
    epoch, the subset and threshold choice, the test evaluation, shutdown), and the whole run
    from the processes' launch to their exit (what a user waits for a usable model)."""
    body = [
        [
            f"`{recipe}`", f"{rtt:g}", _num1(c.get("setup_s")), _num1(c.get("rounds_s")),
            _num1(c.get("boundaries_s")),
            _num0(_per_epoch_ms(c)),
            _num1(c.get("final_s")),
            _num1(c.get("wall_s")),
        ]
        for (t, recipe, rtt), c in means.items()
        if t == table and c.get("setup_s") is not None
    ]  # fmt: skip
    header = ["recipe", "RTT ms", "start-up and alignment", "training rounds", "epoch ends"]
    after = ["ms / epoch end", "after the last epoch", "whole run (to a usable model)"]
    return md_table([*header, *after], body)


def _verdict(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _per_epoch_ms(cell: Row) -> float | None:
    ends = cell.get("boundaries_s")
    return None if ends is None else 1000 * ends / cell["epochs"]


def _num0(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _num1(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
