"""Run cached benchmark tasks, in this process or in spawned worker processes.

A task writes one JSON file. A task whose file exists is skipped, so an interrupted benchmark
resumes where it stopped; files are written atomically (temporary name, then rename), so a killed
run never leaves a half-written result behind.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tqdm import tqdm

log = logging.getLogger(__name__)

Worker = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Task:
    label: str  # for progress and logs, e.g. "laser p0.1 seed2"
    payload: dict[str, Any]  # JSON-serialisable input of the worker
    out: Path  # the result file


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch

    return {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "gpu": torch.cuda.is_available(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def code_version() -> str:
    """The checkout's commit, with "+dirty" when the work tree has changes (or "unknown");
    VFL_CODE_VERSION names it for a tree without git (a `git archive` export that a benchmark
    runs from, so that editing the checkout cannot change the code under measurement)."""
    if os.environ.get("VFL_CODE_VERSION"):
        return os.environ["VFL_CODE_VERSION"]
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def invocation(started: float, load_before: float, command: str) -> dict[str, Any]:
    """What a benchmark invocation records about itself: when it ended and how long it took
    (`started`: time.perf_counter() at its start), the machine, the code, the 1-minute load
    average at its start and end, and the command."""
    import time

    return {
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "machine": machine(),
        "code": code_version(),
        "load_average": [load_before, os.getloadavg()[0]],
        "command": command,
    }


def pending(tasks: Sequence[Task]) -> list[Task]:
    return [t for t in tasks if not t.out.exists()]


def run_tasks(
    worker: Worker,
    tasks: Sequence[Task],
    jobs: int,
    *,
    desc: str = "runs",
    progress: bool = True,
    meta: dict[str, Any] | None = None,
) -> list[str]:
    """Run the tasks whose result file is missing; returns the labels of those that failed.

    jobs 0 runs them in this process (tests); jobs >= 1 in that many spawned processes, each
    with one torch thread (set by `run_one`).
    """
    todo = pending(tasks)
    log.info("%d of %d %s cached; %d to run", len(tasks) - len(todo), len(tasks), desc, len(todo))
    failed: list[str] = []
    bar = tqdm(total=len(todo), desc=desc, unit="run", disable=not progress)
    if jobs <= 0:
        for task in todo:
            _finish(task, lambda t=task: run_one(worker, t, meta), failed, bar)
        bar.close()
        return failed
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures: dict[Future, Task] = {pool.submit(run_one, worker, t, meta): t for t in todo}
        for future in as_completed(futures):
            _finish(futures[future], future.result, failed, bar)
    bar.close()
    return failed


def _finish(task: Task, result: Callable[[], Path], failed: list[str], bar: tqdm) -> None:
    try:
        result()
        log.info("finished %s -> %s", task.label, task.out)
    except Exception:
        log.exception("task %s failed", task.label)
        failed.append(task.label)
    bar.update(1)
    bar.set_postfix_str(task.label)


def run_one(worker: Worker, task: Task, meta: dict[str, Any] | None = None) -> Path:
    """Run one task and write its result file (with machine, timing, the task's input and
    `meta`, e.g. the command that ran it)."""
    import torch

    torch.set_num_threads(1)
    started = datetime.now(UTC)
    result = worker(task.payload)
    record = {
        "label": task.label,
        "payload": task.payload,
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "code": code_version(),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        **(meta or {}),
        **result,
    }
    write_json(task.out, record)
    return task.out
