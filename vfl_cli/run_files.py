"""Read a run directory (a coordinator's `--out`, or `vfl simulate --run-dir`) for `vfl report`.

results.json is required; epochs.jsonl is optional (runs from before it existed have the epoch
summaries in results.json); config.json is used when results.json has no config. Anything
unreadable is a `RunFileError` that names the file (and line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfl_core.data.learning_task import REGRESSION, TASKS
from vfl_core.errors import VflError
from vfl_core.inference.headline import METRICS, task_of_rows
from vfl_core.persistence.run_log import EPOCHS_FILE

RESULTS_FILE = "results.json"
CONFIG_FILE = "config.json"
# What every test row and subset that scored samples holds, by task (the others are optional;
# R^2 is absent for a single sample, federation RMSE for methods without a federation output).
REQUIRED_METRICS = {
    "classification": ("accuracy", "federation_accuracy", "f1"),
    "regression": ("rmse", "mae"),
}


class RunFileError(VflError):
    """A run directory or one of its files is missing or unreadable."""


@dataclass(frozen=True)
class RunFiles:
    directory: Path
    results: dict[str, Any]
    epochs: list[dict[str, Any]]  # one record per epoch, in epoch order
    config: dict[str, Any]

    @property
    def subsets(self) -> list[dict[str, Any]]:
        return list(self.results.get("subsets") or [])

    @property
    def test_rows(self) -> list[dict[str, Any]]:
        test = self.results.get("test") or {}
        return list(test.get("rows") or [])

    @property
    def transitions(self) -> list[dict[str, Any]]:
        return list(self.results.get("transitions") or [])

    @property
    def serving(self) -> dict[str, Any]:
        """After training: the evaluations and predictions served, if the run served any."""
        serving = self.results.get("serving")
        return serving if isinstance(serving, dict) else {}

    @property
    def task(self) -> str:
        return run_task(self.results)

    @property
    def has_auc(self) -> bool:
        return any("auc" in row for row in [*self.test_rows, *self.subsets])

    @property
    def has_brier(self) -> bool:
        return any("brier" in row for row in [*self.test_rows, *self.subsets])


def run_task(results: dict[str, Any]) -> str:
    """The task results.json names, or for runs written before it did, the one its rows show."""
    task = results.get("task")
    if isinstance(task, str):
        return task
    rows = [*((results.get("test") or {}).get("rows") or []), *(results.get("subsets") or [])]
    return task_of_rows(r for r in rows if isinstance(r, dict))


def load_run(directory: Path) -> RunFiles:
    if not directory.is_dir():
        raise RunFileError(f"{directory}: no such run directory")
    results = _json_object(directory / RESULTS_FILE, required=True)
    _check_results(directory / RESULTS_FILE, results)
    epochs = _epochs(directory / EPOCHS_FILE)
    if not epochs:
        listed = results.get("epochs") or []
        epochs = [e for e in listed if isinstance(e, dict) and isinstance(e.get("epoch"), int)]
    config = results.get("config")
    if not isinstance(config, dict):
        config = _json_object(directory / CONFIG_FILE, required=False)
    return RunFiles(directory, results, sorted(epochs, key=lambda e: e["epoch"]), config)


def _json_object(path: Path, required: bool) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if not required:
            return {}
        raise RunFileError(
            f"{path}: not found (a run directory is a coordinator's --out or "
            "`vfl simulate --run-dir`, written when training ends)"
        ) from None
    except OSError as err:
        raise RunFileError(f"{path}: cannot read ({err.strerror})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFileError(
            f"{path}: not valid JSON (line {err.lineno} column {err.colno}: {err.msg})"
        ) from None
    if not isinstance(value, dict):
        raise RunFileError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def _check_results(path: Path, results: dict[str, Any]) -> None:
    """The entries the report draws from have the types it expects."""
    kinds = {
        "test": (dict, type(None)),
        "subsets": list,
        "epochs": list,
        "transitions": list,
        "serving": dict,
    }
    for key, kind in kinds.items():
        if key in results and not isinstance(results[key], kind):
            raise RunFileError(f"{path}: entry {key!r} has the wrong type")
    if "task" in results and results["task"] not in TASKS:
        raise RunFileError(f"{path}: task must be one of {', '.join(TASKS)}")
    for i, subset in enumerate(results.get("subsets") or []):
        if not isinstance(subset, dict) or not isinstance(subset.get("blocks"), list):
            raise RunFileError(f"{path}: subsets[{i}] has no list of blocks")
    rows = (results.get("test") or {}).get("rows") or []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("observed"), str):
            raise RunFileError(f"{path}: test.rows[{i}] has no observed blocks")
    task = run_task(results)
    for i, subset in enumerate(results.get("subsets") or []):
        _check_numbers(path, f"subsets[{i}]", subset, task)
    for i, row in enumerate(rows):
        _check_numbers(path, f"test.rows[{i}]", row, task)


def _check_numbers(path: Path, where: str, entry: dict[str, Any], task: str) -> None:
    """samples, the task's metrics where samples were scored, any other metric a number."""
    _check_number(path, where, entry, "samples")
    if entry["samples"]:
        for key in REQUIRED_METRICS[task]:
            _check_number(path, where, entry, key)
    for key in METRICS:
        if key in entry:
            _check_number(path, where, entry, key)
    if task != REGRESSION and "rmse" in entry:
        raise RunFileError(f"{path}: {where} holds regression errors in a {task} run")


def _check_number(path: Path, where: str, entry: dict[str, Any], key: str) -> None:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunFileError(f"{path}: {where}.{key} is not a number")


def _epochs(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as err:
        raise RunFileError(f"{path}: cannot read ({err.strerror})") from None
    records = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if not line.endswith("\n"):
            continue  # a line cut short by a crash: the epoch is not finished
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise RunFileError(f"{path} line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("epoch"), int):
            raise RunFileError(f"{path} line {number}: not an epoch record (no epoch number)")
        records.append(record)
    return records
