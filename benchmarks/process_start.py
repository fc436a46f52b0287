"""What a real `vfl-client` process pays to start, as every real-process test pays it: the
project's own modules imported from source (PYTHONDONTWRITEBYTECODE set, nothing cached) against
byte-compiled ones (what tests/conftest.py compiles once per session), alternated, in fresh
interpreters on a copy of the packages (the checkout's __pycache__ is left alone).

    python -m benchmarks.process_start --runs 6
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vfl_cli", "vfl_client", "vfl_coordinator", "vfl_core", "vfl_wire")
IMPORT = "import vfl_client.runner, vfl_cli.client_cmd"  # what a training client imports
_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")


def start_once(tree: Path) -> tuple[float, float]:
    """(ms of the project's modules' own import time, CPU seconds of the whole process)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [sys.executable, "-X", "importtime", "-c", IMPORT]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=tree)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = sum(
        int(m.group(1))
        for m in map(_LINE.match, done.stderr.splitlines())
        if m and m.group(2).split(".")[0] in PACKAGES
    )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return own / 1000, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    runs = parser.parse_args().runs
    results: dict[str, list[tuple[float, float]]] = {"source": [], "compiled": []}
    with tempfile.TemporaryDirectory(prefix="vfl-start-") as tmp:
        tree = Path(tmp)
        for name in PACKAGES:
            shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        for _ in range(runs):
            for cache in tree.rglob("__pycache__"):
                shutil.rmtree(cache)
            results["source"].append(start_once(tree))
            for name in PACKAGES:
                compileall.compile_dir(tree / name, quiet=2)
            results["compiled"].append(start_once(tree))
    print(f"`{IMPORT}`, {runs} alternated runs each, medians:")
    for kind, rows in results.items():
        own = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(f"  {kind:8s}: project modules {own:6.0f} ms, process CPU {cpu:5.2f} s")


if __name__ == "__main__":
    main()
