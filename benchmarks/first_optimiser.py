"""What a process pays for its first optimiser: torch.optim.Adam (which imports torch._dynamo on
first use) against vfl_core.model.eager_optim.EagerAdam (the same updates, without it), in
fresh interpreters, alternated. Each builds a party-sized model, its optimiser, and takes one
step; the figures are the whole process's CPU seconds and wall seconds.

    python -m benchmarks.first_optimiser --runs 7
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SCRIPT = """
import sys, torch
from vfl_core.model.eager_optim import EagerAdam
cls = EagerAdam if sys.argv[1] == "eager" else torch.optim.Adam
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
optimiser = cls(model.parameters(), lr=1e-3, weight_decay=1e-4)
model(torch.randn(128, 16)).sum().backward()
optimiser.step()
assert ("torch._dynamo" in sys.modules) == (sys.argv[1] == "torch")
"""
KINDS = ("torch", "eager")


def run_once(kind: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _SCRIPT, kind], check=True, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    figures: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    for _ in range(runs):
        for kind in KINDS:
            figures[kind].append(run_once(kind))
    print("| first optimiser | CPU s (median) | wall s (median) | runs |")
    print("| --- | ---: | ---: | ---: |")
    for kind in KINDS:
        cpu = statistics.median(f[0] for f in figures[kind])
        wall = statistics.median(f[1] for f in figures[kind])
        name = "torch.optim.Adam" if kind == "torch" else "EagerAdam"
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | {runs} |")


if __name__ == "__main__":
    main()
