"""The federation's rows of `vfl bench tabular`, each run the way a user runs it, with defaults
(the seed aside, and --epochs in the quick mode):

- `federation`: `vfl simulate --data party0.csv --data party1.csv --data party2.csv --id-column id
  --label-column label` (in process);
- `label_alone`: the same command with party 0's CSV only (the federation with K = 1);
- `federation_grpc`: one `vfl-coordinator` and a `vfl-client --data partyK.csv` per party on
  loopback (benchmarks.procs: plaintext and keyed-hash alignment, so TLS and PSI are not timed).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import procs
from benchmarks.tabular_data import Prepared
from benchmarks.tabular_tables import ID_COLUMN, LABEL_BLOCK, LABEL_COLUMN
from vfl_core.data.learning_task import REGRESSION

log = logging.getLogger(__name__)

Row = dict[str, Any]
# The metrics the federation's result rows may carry (whichever its task has).
METRIC_KEYS = ("samples", "accuracy", "f1", "auc", "brier", "rmse", "mae", "r2")


def simulate_args(prep: Prepared, paths: list[Path], out: Path, epochs: int | None) -> list[str]:
    """What a user types to simulate these party tables (the seed fixed, defaults otherwise)."""
    args = ["simulate"]
    for path in paths:
        args += ["--data", str(path)]
    args += ["--id-column", ID_COLUMN, "--label-column", LABEL_COLUMN]
    if prep.task == REGRESSION:
        args += ["--task", REGRESSION]
    args += ["--seed", str(prep.seed), "--out", str(out), "--no-progress"]
    return args + (["--epochs", str(epochs)] if epochs is not None else [])


def simulate_row(
    name: str,
    prep: Prepared,
    parties: list[int],
    out: Path,
    epochs: int | None,
    curve_every: int = 0,
    extra: tuple[str, ...] = (),
) -> Row:
    """`vfl simulate` on the given parties' CSVs, in this process. With `curve_every`, it also
    scores the test rows every that many epochs (`--run-dir --eval-every`: a diagnostic of the
    epoch count, never used to choose a model; training is the same with or without it).
    `extra`: options added to the defaults (benchmarks.tabular_sweep)."""
    import typer

    from vfl_cli.app import app

    args = simulate_args(prep, [prep.split.paths[k] for k in parties], out, epochs) + list(extra)
    run_dir = out.with_suffix(".run")
    if curve_every:
        args += ["--run-dir", str(run_dir), "--eval-every", str(curve_every)]
    printed = io.StringIO()
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(printed):
        typer.main.get_command(app).main(args, standalone_mode=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    result = json.loads(out.read_text())
    report = result["results"][0]
    return {
        "row": name,
        "seconds": result["seconds"],
        "wall_seconds": wall,
        # the whole command's process CPU time (every party: one process), and each epoch's
        # rounds (those that called parties) and its rounds' CPU time, from the engine's records
        "cpu_seconds": cpu,
        "rounds": [e.get("trained_rounds", e["rounds"]) for e in result["epochs"]],
        "epoch_cpu_seconds": [e.get("cpu_seconds", 0.0) for e in result["epochs"]],
        "scores": _scores(report["rows"]),
        "unscored": report.get("unscored", 0),
        "train": result["config"]["train"],
        "epochs": len(result["epochs"]),
        "early_stop": result.get("early_stop"),
        # the observed sets the validation predicts with other heads (TrainConfig.concat_head)
        "heads": (result.get("validation_choice") or {}).get("heads", []),
        "command": "vfl " + " ".join(args),
        "printed": printed.getvalue(),
        "curve": _curve(run_dir / "epochs.jsonl") if curve_every else [],
    }


def _curve(path: Path) -> list[dict[str, Any]]:
    """The test scores logged during training: epoch (1-based) and metrics."""
    out = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "test" in entry:
            test = {k: entry["test"][k] for k in METRIC_KEYS if k in entry["test"]}
            out.append({"epoch": entry["epoch"] + 1, **test})
    return out


def _scores(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The federation's result rows by observed set ("all" included)."""
    return {r["observed"]: {k: r[k] for k in METRIC_KEYS if k in r} for r in rows}


def grpc_row(prep: Prepared, workdir: Path, epochs: int | None) -> Row:
    """The federation over gRPC, real processes on loopback; `seconds` from the coordinator's
    start to its exit (process start-up included)."""
    coordinator = ["--seed", str(prep.seed)]
    coordinator += ["--epochs", str(epochs)] if epochs is not None else []
    start = time.perf_counter()
    with procs.federation(
        prep.split.paths, workdir, coordinator, network=_client_args(prep)
    ) as out:
        pass
    seconds = time.perf_counter() - start
    result = procs.results(out)
    return {
        "row": "federation_grpc",
        "seconds": seconds,
        "scores": _scores(result["test"]["rows"]),
        "unscored": result["test"].get("unscored", 0),
        "epochs": len(result["epochs"]),
        "early_stop": result.get("early_stop"),
        "rounds": [e.get("trained_rounds", e["rounds"]) for e in result["epochs"]],
    }


def _client_args(prep: Prepared) -> Callable[[int, int], list[str]]:
    """procs.federation's per-client options: loopback plus what a party's table needs."""

    def args(k: int, port: int) -> list[str]:
        out = ["--coordinator", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0"]
        return out + table_client_args(prep, k)

    return args


def table_client_args(prep: Prepared, k: int) -> list[str]:
    """The `vfl-client` options party k's CSV needs (its ID column, its block, the labels at
    the label party; the task or the class count), whatever network it reaches the
    coordinator over (benchmarks.wan_tables shapes it)."""
    out = ["--id-column", ID_COLUMN, "--block", str(k), "--clients", str(len(prep.split.paths))]
    if k == LABEL_BLOCK:
        out += ["--label-column", LABEL_COLUMN]
    if prep.task == REGRESSION:
        out += ["--task", REGRESSION]
    elif k != LABEL_BLOCK:
        out += ["--num-classes", str(len(prep.classes))]
    return out
