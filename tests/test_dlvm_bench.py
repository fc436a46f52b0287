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


def test_a_dlvm_run_name_carries_its_stage1_epochs_unless_the_unnamed_count(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    names = {t.payload["method"]: t.out.name for t in job(tmp_path).tasks()[:3]}
    assert names["dlvm"] == "credit_mcar0.2_dlvm_s0_e1.json"  # stage 1 of 1 epoch
    assert names["laser"] == "credit_mcar0.2_laser_s0.json"  # no stage 1: shared by lengths
    five = replace(job(tmp_path), stage1_epochs=dlvm.UNNAMED_STAGE1).tasks()[0]
    assert five.out.name == "credit_mcar0.2_dlvm_s0.json"  # the runs cached before the suffix


def test_flattened_is_the_relative_change_over_the_last_tenth_of_the_epochs() -> None:
    bound = [-100.0 + i for i in range(10)] + [-90.0] * 9 + [-89.9]  # 20 epochs
    # the last 2 epochs: -90.0 -> -89.9, 0.11%
    assert dlvm.flattened(bound) == pytest.approx(0.1 / 90.0)
    assert dlvm.flattened(bound) < dlvm.FLAT_TOL
    assert dlvm.flattened([-100.0, -50.0]) == pytest.approx(0.5)  # one epoch of two
    assert dlvm.flattened([-1.0]) == float("inf")  # nothing to compare


def test_report_shows_the_stage1_curve_and_laser_beside_it(tmp_path: Path) -> None:
    j = job(tmp_path)
    for task in j.tasks():
        write_json(task.out, {"accuracy": {"mcar:0": 70.0, "mnar:0.9": 60.0}})
    curve = [-20.0, -15.0, -12.0, -11.0, -10.5, -10.2, -10.1, -10.05, -10.03, -10.02]
    long = j.runs_dir / "credit_mcar0.2_dlvm_s0_e10.json"  # the job's own are _e1
    write_json(long, {"accuracy": {"mcar:0": 80.0}, "stage1_bound": curve})
    _, text = dlvm.write_report(j)
    section = text.split("## Stage 1 to convergence")[1]
    assert "| 1 | -20.000 |" in section and "| 10 | -10.020 |" in section
    assert "credit, train mcar:0.2, seed 0: 10 stage-1 epochs; the last 1 changed" in section
    assert "0.10% (flattened" in section  # -10.03 -> -10.02
    assert "DLVM 80.0, LASER-VFL 70.0 +- 0.0 (n=2)" in section
