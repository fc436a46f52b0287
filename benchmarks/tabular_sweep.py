"""The settings the tabular defaults were chosen from (issue 27): each setting is `vfl simulate`
on the same party CSVs as `vfl bench tabular` (benchmarks.tabular_tables, every table and seed),
with a few options added to the defaults; the federation in process (and, for settings that
name it, the label party alone). Test scores are compared side by side, one run of each
setting per table and seed; the choice is by the mean over every table and seed, never one
table's.

    python -m benchmarks.tabular_sweep --data-path ../shared/data --settings defaults f1 \
        --out benchmarks/results/runs/tabular-sweep
    python -m benchmarks.tabular_sweep --summarise benchmarks/results/runs/tabular-sweep

Each (setting, table, seed) is one cached JSON under `--out` (delete it to rerun).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.pool import Task, read_json, run_tasks
from benchmarks.tabular_data import prepare
from benchmarks.tabular_federation import simulate_row
from benchmarks.tabular_tables import LABEL_BLOCK, K, tables

# setting -> the options it adds to the defaults; "+alone" also runs the label party alone.
SETTINGS: dict[str, list[str]] = {
    "defaults": [],
    "defaults+alone": [],
    "f1": ["--threshold", "f1"],
    "f1+alone": ["--threshold", "f1"],
    "t0.5": ["--threshold", "0.5"],
    "head-mlp": ["--head", "mlp"],
    "own-sets": ["--no-serve-feature-only"],
    "wd1e-3": ["--weight-decay", "1e-3"],
    "hidden128x2": ["--hidden", "128,128"],
    "cosine": ["--scheduler", "cosine"],
    "patience-always": ["--early-stop-patience", "5"],
    "lr3e-3": ["--lr", "3e-3"],
    "ple8": [],
    "ple16": [],
    "no-ple": [],
    "ple8-head-mlp": ["--head", "mlp"],
}
# settings that change a default no option reaches yet: vfl_core.data.preprocess's numeric bins
NUMERIC_BINS: dict[str, int] = {"ple8": 8, "ple16": 16, "no-ple": 0, "ple8-head-mlp": 8}
SEEDS = (0, 1, 2)


def worker(payload: dict[str, Any]) -> dict[str, Any]:
    data_path = Path(payload["data_path"]) if payload["data_path"] else None
    table = tables(data_path, False)[payload["table"]](payload["seed"], False)
    extra = list(payload["extra"])
    if payload.get("numeric_bins") is not None:
        from vfl_core.data import preprocess

        preprocess.DEFAULT_NUMERIC_BINS = payload["numeric_bins"]
    with tempfile.TemporaryDirectory(prefix="vfl-tabular-sweep-") as tmp:
        prep = prepare(table, payload["seed"], Path(tmp) / "parties")
        rows = [_row("federation", prep, list(range(K)), Path(tmp) / "fed.json", extra)]
        if payload["alone"]:
            rows.append(_row("label_alone", prep, [LABEL_BLOCK], Path(tmp) / "a.json", extra))
    return {"task": table.task, "rows_run": rows}


def _row(name: str, prep: Any, parties: list[int], out: Path, extra: list[str]) -> dict:
    return simulate_row(name, prep, parties, out, None, extra=tuple(extra))


def tasks(args: argparse.Namespace) -> list[Task]:
    names = args.tables or list(tables(args.data_path, False))
    out = []
    for setting in args.settings:
        for table in names:
            for seed in args.seeds:
                payload = {
                    "table": table,
                    "seed": seed,
                    "extra": SETTINGS[setting],
                    "alone": setting.endswith("+alone"),
                    "numeric_bins": NUMERIC_BINS.get(setting),
                    "data_path": str(args.data_path) if args.data_path else None,
                }
                path = args.out / setting / f"{table}-s{seed}.json"
                out.append(Task(f"{setting} {table} s{seed}", payload, path))
    return out


def summarise(root: Path, baselines: Path) -> str:
    """Mean test accuracy (RMSE) per table and setting, beside the cached baselines of
    `vfl bench tabular` (linear, hgb) on the same tables and seeds."""
    scores: dict[tuple[str, str], list[float]] = {}
    tables_seen: dict[str, str] = {}
    for path in sorted(root.glob("*/*.json")):
        run = read_json(path)
        if run is None:
            continue
        table = path.stem.rsplit("-s", 1)[0]
        metric = "rmse" if run["task"] == "regression" else "accuracy"
        tables_seen[table] = metric
        for row in run["rows_run"]:
            name = path.parent.name + ("" if row["row"] == "federation" else " alone")
            value = row["scores"]["all"][metric]
            scores.setdefault((name, table), []).append(value * (1 if metric == "rmse" else 100))
    for table, metric in tables_seen.items():
        for path in sorted(baselines.glob(f"{table}-s*-local.json")):
            run = read_json(path) or {"rows_run": []}
            for row in run["rows_run"]:
                if row["row"] in ("linear", "hgb", "central_mlp"):
                    value = row["scores"]["all"][metric] * (1 if metric == "rmse" else 100)
                    scores.setdefault((f"[{row['row']}]", table), []).append(value)
    names = sorted({n for n, _ in scores})
    header = "| setting | " + " | ".join(f"{t} ({m})" for t, m in tables_seen.items()) + " |"
    lines = [header, "| --- " * (len(tables_seen) + 1) + "|"]
    for name in names:
        cells = []
        for table in tables_seen:
            values = scores.get((name, table), [])
            if not values:
                cells.append("-")
                continue
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.2f} ± {sd:.2f} ({len(values)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path)
    parser.add_argument("--settings", nargs="*", default=["defaults"], choices=list(SETTINGS))
    parser.add_argument("--tables", nargs="*")
    parser.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/runs/tabular-sweep"))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--summarise", type=Path)
    parser.add_argument("--baselines", type=Path, default=Path("benchmarks/results/runs/tabular"))
    args = parser.parse_args()
    if args.summarise:
        print(summarise(args.summarise, args.baselines))
        return
    failed = run_tasks(worker, tasks(args), args.jobs, desc="sweep runs", progress=False)
    if failed:
        raise SystemExit(f"failed: {failed}")


if __name__ == "__main__":
    main()
