"""Local updates on cached tensors (`--local-steps R`, docs/local-updates.md): quality and rounds
to the model at R in {0, 2, 4} on the two table workloads of issue 43, with the defaults otherwise.

- `credit`: UCI Credit (4000 rows) as `vfl bench tabular` cuts it (benchmarks.tabular_tables: K = 3,
  labels at party 0, parties missing 10% / 30% / 30% of the rows, drawn per seed);
- `census`: the generated census-like table (benchmarks.census_like, its own seed 7: a bank with
  the label, a retailer and a registry, missing 10% / 30% / 30%, its own test files).

Each (workload, seed, R) is `vfl simulate` in this process, one cached JSON under
`results/runs/local-updates/`; the report `results/local_updates.md` is rebuilt from them.

    python -m benchmarks.local_updates --data-path ../shared/data --workloads credit
    python -m benchmarks.local_updates --report-only
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import census_like
from benchmarks.pool import Task, read_json, run_tasks
from benchmarks.tabular_data import prepare
from benchmarks.tabular_federation import METRIC_KEYS, simulate_args
from benchmarks.tabular_tables import K, tables

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "runs" / "local-updates"
REPORT = RESULTS / "local_updates.md"
WORKLOADS = ("credit", "census")
STEPS = (0, 2, 4)
SEEDS = (0, 1, 2)
CENSUS_SEED = 7  # the census-like table's own seed (the same table for every run seed)
NOTES = "## Reading"  # a hand-written section a rewrite of the report keeps


def census_args(directory: Path, seed: int, out: Path) -> list[str]:
    """`vfl simulate` on the census-like parties (benchmarks.census_like's own command)."""
    census_like.write(directory, CENSUS_SEED)
    args = ["simulate"]
    for name in ("bank", "retail", "registry"):
        args += ["--data", str(directory / f"{name}.csv")]
    for name in ("bank", "retail", "registry"):
        args += ["--test-data", str(directory / f"{name}_test.csv")]
    args += ["--id-column", "id", "--label-column", "income"]
    return [*args, "--seed", str(seed), "--out", str(out), "--no-progress"]


def worker(payload: dict[str, Any]) -> dict[str, Any]:
    """One workload, seed and R: the run's scores, rounds and CPU seconds."""
    seed, steps = payload["seed"], payload["steps"]
    with tempfile.TemporaryDirectory(prefix="vfl-bench-local-") as tmp:
        out = Path(tmp) / "fed.json"
        if payload["workload"] == "census":
            args = census_args(Path(tmp) / "census", seed, out)
        else:
            data_path = Path(payload["data_path"])
            table = tables(data_path, False)["credit"](seed, False)
            prep = prepare(table, seed, Path(tmp) / "parties")
            args = simulate_args(prep, list(prep.split.paths), out, None)
        args += ["--local-steps", str(steps)]
        command = _clean("vfl " + shlex.join(args))
        if not payload.get("weights"):
            return {**_simulate(args), "command": command}
        with _recorded_weights() as seen:
            result = _simulate(args)
        return {**result, "command": command, "weights": _summary(seen)}


@contextlib.contextmanager
def _recorded_weights() -> Iterator[list[np.ndarray]]:
    """Every row weight the local steps compute while inside (a diagnostic run)."""
    from vfl_core.methods.laser import local_steps

    seen: list[np.ndarray] = []
    original = local_steps.cosine_weights

    def recording(fresh: torch.Tensor, cached: torch.Tensor) -> torch.Tensor:
        weights = original(fresh, cached)
        seen.append(weights.numpy().copy())
        return weights

    local_steps.cosine_weights = recording  # type: ignore[assignment]
    try:
        yield seen
    finally:
        local_steps.cosine_weights = original  # type: ignore[assignment]


def _summary(seen: list[np.ndarray]) -> dict[str, float]:
    weights = np.concatenate(seen) if seen else np.zeros(0)
    if not weights.size:
        return {"rows": 0}
    return {
        "rows": int(weights.size),
        "mean": float(weights.mean()),
        "p1": float(np.quantile(weights, 0.01)),
        "p5": float(np.quantile(weights, 0.05)),
        "min": float(weights.min()),
        "max": float(weights.max()),
        "below_half": float((weights < 0.5).mean()),
        "zero": float((weights == 0).mean()),
    }


def _simulate(args: list[str]) -> dict[str, Any]:
    import typer

    from vfl_cli.app import app

    cpu, wall = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        typer.main.get_command(app).main(args, standalone_mode=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    result = json.loads(Path(args[args.index("--out") + 1]).read_text())
    rows = {r["observed"]: r for r in result["results"][0]["rows"]}
    epochs = [e["rounds"] for e in result["epochs"]]
    stop = result.get("early_stop") or {}
    # the best epoch, 0-based (results.json writes it 1-based where it says `epochs_from: 1`)
    best = stop.get("best_epoch")
    best = len(epochs) - 1 if best is None else int(best) - int(stop.get("epochs_from", 0))
    return {
        "scores": {k: rows["all"][k] for k in METRIC_KEYS if k in rows["all"]},
        "epochs": len(epochs),
        "best_epoch": best + 1,
        "rounds": sum(epochs),
        "rounds_to_model": sum(epochs[: best + 1]),
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "train": result["config"]["train"],
    }


def tasks(
    workloads: tuple[str, ...],
    seeds: tuple[int, ...],
    steps: tuple[int, ...],
    data: Path,
    weights: bool = False,
) -> list[Task]:
    """A run per (workload, seed, R); `weights`: diagnostic runs that also record every row
    weight of the local steps (their own files; training is the same)."""
    prefix = "weights-" if weights else ""
    return [
        Task(
            f"{prefix}{w} s{s} R{r}",
            {"workload": w, "seed": s, "steps": r, "data_path": str(data), "weights": weights},
            RUNS / f"{prefix}{w}-s{s}-r{r}.json",
        )
        for w in workloads
        for s in seeds
        for r in steps
    ]


# ---------------------------------------------------------------- the report


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _cell(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    mean, sd = _mean_sd([v * scale for v in values])
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def workload_table(runs: list[dict[str, Any]]) -> list[str]:
    """One workload's rows, R ascending, and each metric's difference from R = 0 in R = 0's
    seed-sd."""
    by_steps: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        by_steps.setdefault(run["payload"]["steps"], []).append(run)
    lines = [
        "| R | seeds | accuracy % | F1 % | AUC | rounds to the model | rounds trained | "
        "epochs (best) | CPU s | CPU ms / round |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for steps in sorted(by_steps):
        group = sorted(by_steps[steps], key=lambda r: r["payload"]["seed"])
        scores = [r["scores"] for r in group]
        per_round = [1000 * r["cpu_seconds"] / r["rounds"] for r in group]
        lines.append(
            f"| {steps} | {','.join(str(r['payload']['seed']) for r in group)} "
            f"| {_cell([s['accuracy'] for s in scores], 100)} "
            f"| {_cell([s['f1'] for s in scores], 100)} "
            f"| {_cell([s['auc'] for s in scores], 1, 4)} "
            f"| {_cell([r['rounds_to_model'] for r in group], 1, 0)} "
            f"| {_cell([r['rounds'] for r in group], 1, 0)} "
            f"| {statistics.mean(r['epochs'] for r in group):.1f} "
            f"({statistics.mean(r['best_epoch'] for r in group):.1f}) "
            f"| {statistics.mean(r['cpu_seconds'] for r in group):.1f} "
            f"| {statistics.mean(per_round):.1f} |"
        )
    lines += ["", *_verdicts(by_steps)]
    return lines


def _verdicts(by_steps: dict[int, list[dict[str, Any]]]) -> list[str]:
    """Each R's difference from R = 0 per metric: in R = 0's seed-sd, in the pooled sd of the
    two, and per seed (the same seed's data and plan at both R)."""
    if 0 not in by_steps or len(by_steps[0]) < 2:
        return []
    lines = []
    for steps in sorted(s for s in by_steps if s):
        parts = []
        lower: list[str] = []
        for metric, scale in (("accuracy", 100), ("f1", 100), ("auc", 1)):
            base = {r["payload"]["seed"]: r["scores"][metric] * scale for r in by_steps[0]}
            got = {r["payload"]["seed"]: r["scores"][metric] * scale for r in by_steps[steps]}
            (mean0, sd0), (mean, sd) = _mean_sd(list(base.values())), _mean_sd(list(got.values()))
            pooled = ((sd0**2 + sd**2) / 2) ** 0.5
            paired = [got[k] - base[k] for k in sorted(got.keys() & base.keys())]
            if mean0 - mean > sd0:
                lower.append(metric)
            digits = 2 if scale == 100 else 4
            seeds = ", ".join(f"{d:+.{digits}f}" for d in paired)
            parts.append(
                f"{metric} {mean - mean0:+.{digits}f}{' points' if scale == 100 else ''} "
                f"({(mean - mean0) / sd0:+.2f} R = 0 sd, {(mean - mean0) / pooled:+.2f} "
                f"pooled sd; per seed {seeds})"
            )
        rounds0 = statistics.mean(r["rounds_to_model"] for r in by_steps[0])
        rounds = statistics.mean(r["rounds_to_model"] for r in by_steps[steps])
        verdict = (
            f"lower by more than one R = 0 seed-sd: {', '.join(lower)}"
            if lower
            else "none lower by more than one R = 0 seed-sd"
        )
        lines.append(
            f"- R = {steps} against R = 0: {'; '.join(parts)}. {verdict}; "
            f"rounds to the model x{rounds / rounds0:.2f}."
        )
    return lines


def weights_section(diagnostics: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[str]:
    """The row weights the diagnostic runs recorded, each beside the plain run it repeats."""
    if not diagnostics:
        return []
    lines = [
        "## The row weights",
        "",
        "Every weight w_i = max(0, cos(fresh, sent)) the feature parts of the local steps "
        "computed, recorded by repeating one run per workload with `--weights`; the repeat "
        "trains the same model as the plain run (same accuracy and rounds: a check of "
        "determinism).",
        "",
        "| workload | seed | R | rows weighed | mean | 1st pct | 5th pct | min | share < 0.5 "
        "| share 0 | same as the plain run |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for d in diagnostics:
        key = (d["payload"]["workload"], d["payload"]["seed"], d["payload"]["steps"])
        plain = [
            r
            for r in runs
            if (r["payload"]["workload"], r["payload"]["seed"], r["payload"]["steps"]) == key
        ]
        same = (
            "-"
            if not plain
            else (
                "yes"
                if plain[0]["scores"] == d["scores"] and plain[0]["rounds"] == d["rounds"]
                else "no"
            )
        )
        w = d["weights"]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {w['rows']} | {w['mean']:.4f} | {w['p1']:.4f} "
            f"| {w['p5']:.4f} | {w['min']:.4f} | {w['below_half']:.4f} | {w['zero']:.4f} "
            f"| {same} |"
        )
    return [*lines, ""]


def _clean(command: str) -> str:
    """A run's command with its temporary directory named DIR."""
    return re.sub(r"/\S*/vfl-bench-local-[^/\s]+/", "DIR/", command)


def report() -> str:
    every = [r for p in sorted(RUNS.glob("*.json")) if (r := read_json(p))]
    runs = [r for r in every if not r["payload"].get("weights")]
    invocations = sorted({r.get("invocation", "") for r in every} - {""})
    lines = [
        "# Local updates on cached tensors: quality and rounds to the model",
        "",
        "`--local-steps R` (docs/local-updates.md): after each round every party takes R "
        "more steps on the round's cached embeddings and gradients. Defaults otherwise (batch 64, "
        "cosine schedule over the 60-epoch ceiling, early stopping with patience 10 on 10% of "
        "the training rows); accuracy, F1 (positive class) and ROC AUC on every test row, "
        "mean ± sd over the seeds; rounds to the model: rounds up to the end of the epoch early "
        "stopping restored. CPU seconds: the whole `vfl simulate` in one process (every party, "
        "the validation and the test), one torch thread.",
        "",
        "Commands (one invocation at a time, `nice -n 10`): "
        + ", ".join(f"`{c}`" for c in invocations)
        + "; then `python -m benchmarks.local_updates --report-only`.",
        "",
    ]
    for workload in WORKLOADS:
        group = [r for r in runs if r["payload"]["workload"] == workload]
        if not group:
            continue
        loads = [x for r in group for x in r["load_average"][:1]]
        first, last = min(r["started"] for r in group), max(r["finished"] for r in group)
        codes = sorted({r["code"] for r in group})
        main = [r for r in group if r["payload"]["seed"] in SEEDS]
        lines += [
            f"## {workload}",
            "",
            f"`{_clean(group[0]['command'])}` (seed and R varied; DIR: a temporary directory). "
            f"{len(group)} runs, {first} to {last} UTC, code {', '.join(codes)}, 1-minute load "
            f"at the end of each run {min(loads):.1f}-{max(loads):.1f} on "
            f"{group[0]['machine']['cores']} cores (other work on the machine).",
            "",
            f"Seeds {', '.join(map(str, SEEDS))}:",
            "",
            *workload_table(main),
            "",
        ]
        more = sorted({r["payload"]["seed"] for r in group} - set(SEEDS))
        if more:
            both = [
                r
                for r in group
                if all(
                    any(
                        o["payload"]["steps"] == r["payload"]["steps"] and o["payload"]["seed"] == s
                        for o in group
                    )
                    for s in more
                )
            ]
            seeds = sorted({r["payload"]["seed"] for r in both})
            lines += [
                f"Seeds {', '.join(map(str, seeds))} (the R values run on every seed):",
                "",
                *workload_table(both),
                "",
            ]
    lines += weights_section([r for r in every if r["payload"].get("weights")], runs)
    old = REPORT.read_text() if REPORT.exists() else ""
    if NOTES in old:
        lines.append(old[old.index(NOTES) :].rstrip())
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--steps", default=",".join(map(str, STEPS)))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--weights", action="store_true", help="diagnostic runs recording the row weights"
    )
    args = parser.parse_args()
    command = "python -m benchmarks.local_updates " + shlex.join(sys.argv[1:])
    if not args.report_only:
        todo = tasks(
            tuple(args.workloads.split(",")),
            tuple(int(s) for s in args.seeds.split(",")),
            tuple(int(s) for s in args.steps.split(",")),
            args.data_path,
            args.weights,
        )
        meta = {"parties": K, "invocation": command}
        failed = run_tasks(worker, todo, 0, desc="local-update runs", meta=meta)
        if failed:
            raise SystemExit(f"failed: {', '.join(failed)}")
    REPORT.write_text(report())


if __name__ == "__main__":
    main()
