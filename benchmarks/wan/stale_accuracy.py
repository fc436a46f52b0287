"""What bounded staleness costs a table's model: `vfl simulate` (in process) on `vfl bench
tabular`'s party CSVs (benchmarks.tabular.data.prepare, partial overlap, K = 3, labels at
party 0), the defaults against the defaults plus each `--staleness S`, side by side per table
and seed in one invocation. In process the federation runs the pipelined engine's rounds, which
the gRPC federation reproduces bit for bit on either data plane (tests/test_direct_grpc.py,
tests/test_pipeline.py), so the scores are those of the real federation with the same option.

    python -m benchmarks.wan.stale_accuracy --data-path ../shared/data --staleness 1 3 \
        --tables credit census_like --seeds 0 1 2

Prints per table and setting the test accuracy, F1 and AUC (mean and sample sd over the seeds,
all test rows), the epochs and rounds trained, and whether each setting's mean is within one
seed-sd of the defaults'.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.tabular.data import prepare
from benchmarks.tabular.rows import simulate_row
from benchmarks.tabular.tables import K, tables

METRICS = (("accuracy", "accuracy %", 100.0), ("f1", "F1 x 100", 100.0), ("auc", "AUC", 1.0))


def run_cell(data_path: Path | None, table: str, seed: int, extra: Sequence[str]) -> dict:
    loaded = tables(data_path, False)[table](seed, False)
    with tempfile.TemporaryDirectory(prefix="vfl-stale-accuracy-") as tmp:
        prep = prepare(loaded, seed, Path(tmp) / "parties", "partial")
        row = simulate_row(
            "federation", prep, list(range(K)), Path(tmp) / "fed.json", None, 0, tuple(extra)
        )
    scores = row["scores"]["all"]
    return {
        **{key: scores.get(key) for key, _, _ in METRICS},
        "epochs": row["epochs"],
        "rounds": sum(row["rounds"]),
    }


def _stat(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def report(results: dict[tuple[str, str], list[dict[str, Any]]], names: Sequence[str]) -> str:
    lines = []
    for table in sorted({t for t, _ in results}):
        lines += [f"## {table}", ""]
        header = ["setting", *(label for _, label, _ in METRICS), "epochs", "rounds"]
        lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        base = results.get((table, names[0]), [])
        for name in names:
            runs = results.get((table, name), [])
            if not runs:
                continue
            cells = [f"`{name}`"]
            for key, _, scale in METRICS:
                mean, sd = _stat([r[key] * scale for r in runs if r[key] is not None])
                ref_mean, ref_sd = _stat([r[key] * scale for r in base if r[key] is not None])
                fmt = "{:.2f}" if scale > 1 else "{:.3f}"
                cell = f"{fmt.format(mean)} +- {fmt.format(sd)}"
                if name != names[0]:
                    diff = mean - ref_mean
                    verdict = "within" if diff >= -ref_sd - 1e-12 else "**below**"
                    cell += (
                        f" ({diff:+.2f}, {verdict})" if scale > 1 else f" ({diff:+.3f}, {verdict})"
                    )
                cells.append(cell)
            cells.append(f"{statistics.fmean(r['epochs'] for r in runs):.1f}")
            cells.append(f"{statistics.fmean(r['rounds'] for r in runs):.1f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path)
    parser.add_argument("--tables", nargs="*", default=["credit", "census_like"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--staleness", nargs="*", type=int, default=[3])
    args = parser.parse_args()
    settings = {
        "defaults": [],
        **{f"staleness{s}": ["--staleness", str(s)] for s in args.staleness},
    }
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for table in args.tables:
        for seed in args.seeds:
            for name, extra in settings.items():
                cell = run_cell(args.data_path, table, seed, extra)
                print(f"{table} seed {seed} {name}: {cell}", flush=True)
                results.setdefault((table, name), []).append(cell)
    print(report(results, list(settings)))


if __name__ == "__main__":
    main()
