"""`vfl bench dlvm`: its tasks, cached records and report (leads computed from the records)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import dlvm
from benchmarks.pool import write_json


def job(tmp_path: Path) -> dlvm.DlvmJob:
    return dlvm.DlvmJob(
        datasets=("credit",),
        train_mechanisms=("mcar:0.2", "mnar:0.7"),
        test_mechanisms=("mcar:0", "mnar:0.9"),
        methods=("dlvm", "laser", "local"),
        seeds=(0, 1),
        results=tmp_path,
        data_path=tmp_path,
        stage1_epochs=1,
        stage2_epochs=1,
        epochs=1,
        jobs=0,
        command="vfl bench dlvm (test)",
    )


def test_one_task_per_dataset_mechanism_seed_and_method(tmp_path: Path) -> None:
    tasks = job(tmp_path).tasks()
    assert len(tasks) == 2 * 2 * 3
    assert len({t.out for t in tasks}) == len(tasks)
    assert tasks[0].payload["tests"] == ["mcar:0", "mnar:0.9"]


def test_report_leads_are_dlvm_minus_the_best_other_method(tmp_path: Path) -> None:
    j = job(tmp_path)
    # DLVM scores 70 / 60; LASER 68 / 50; Local 69 / 55 (seed 1 one point higher everywhere)
    scores = {"dlvm": (70.0, 60.0), "laser": (68.0, 50.0), "local": (69.0, 55.0)}
    for task in j.tasks():
        clean, missing = scores[task.payload["method"]]
        bump = task.payload["seed"]
        write_json(task.out, {"accuracy": {"mcar:0": clean + bump, "mnar:0.9": missing + bump}})
    leads = dlvm.leads(dlvm.collect(j), j)
    assert leads["credit"]["mcar:0"] == pytest.approx(1.0)  # 70.5 - 69.5
    assert leads["credit"]["mnar:0.9"] == pytest.approx(5.0)  # 60.5 - 55.5
    path, text = dlvm.write_report(j)
    assert path == tmp_path / "dlvm.md"
    assert "| DLVM-VFL | 70.5 +- 0.7 (n=2) | 60.5 +- 0.7 (n=2) |" in text
    assert "| credit | +1.0 | +5.0 |" in text
