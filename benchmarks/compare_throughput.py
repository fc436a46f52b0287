"""`vfl bench throughput` of two checkouts side by side, in one run (issue 28: a refactor keeps
CPU and bytes per round within 5%).

    python -m benchmarks.compare_throughput --before ../wt-before --after . --rounds 3 \\
        --data-path ../shared/data --out benchmarks/results/refactor_throughput.md

Each round runs the before checkout's benchmark, then the after one's (MLP parties, batch 128
and 1024, one warm-up and `--repeats` measured epochs each), with PYTHONPATH set to that
checkout, so both share the machine's load as evenly as alternation allows. The table gives,
per setting and transport, the median over the rounds of each run's CPU per round and bytes per
round, and the after / before ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_bench(checkout: Path, data_path: Path, repeats: int, out: Path) -> dict:
    argv = [sys.executable, "-m", "vfl_cli", "bench", "throughput", "--models", "mlp"]
    argv += ["--batch-sizes", "128,1024", "--repeats", str(repeats)]
    argv += ["--data-path", str(data_path.resolve()), "--results", str(out)]
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    subprocess.run(argv, cwd=checkout, env=env, check=True, capture_output=True, text=True)
    return json.loads((out / "throughput.json").read_text())


def _code(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="vfl-compare-") as tmp:
        for r in range(args.rounds):
            for name in ("before", "after"):
                checkout = args.before if name == "before" else args.after
                out = Path(tmp) / f"{name}-{r}"
                runs[name].append(run_bench(checkout, args.data_path, args.repeats, out))
    lines = [
        "# Throughput before and after a refactor, side by side",
        "",
        f"Command: `python -m benchmarks.compare_throughput {' '.join(sys.argv[1:])}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.time() - start:.0f} s).",
        f"Before: {_code(args.before)}; after: {_code(args.after)}. {args.rounds} rounds, each "
        f"running before then after (`vfl bench throughput --models mlp --batch-sizes 128,1024 "
        f"--repeats {args.repeats}`); medians over the rounds.",
        "",
        "| batch | transport | CPU ms/round before | after | after/before | "
        "bytes/round before | after | after/before |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for i, row in enumerate(runs["before"][0]["rows"]):
        for transport in ("in_process", "grpc"):
            cpu = {
                n: statistics.median(run["rows"][i]["cpu_ms_per_round"][transport] for run in rs)
                for n, rs in runs.items()
            }
            if transport == "grpc":
                sent = {
                    n: statistics.median(run["rows"][i]["bytes_per_round"] for run in rs)
                    for n, rs in runs.items()
                }
                bytes_cells = (
                    f"{sent['before']:.0f} | {sent['after']:.0f} | "
                    f"{sent['after'] / sent['before']:.3f}"
                )
            else:
                bytes_cells = "- | - | -"
            lines.append(
                f"| {row['batch']} | {transport} | {cpu['before']:.2f} | {cpu['after']:.2f} | "
                f"{cpu['after'] / cpu['before']:.3f} | {bytes_cells} |"
            )
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
