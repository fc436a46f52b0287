"""Regression (and binary ROC AUC) runs through the run log, the subset evaluation, `vfl simulate`'s
drop-one lines and `vfl report`: every path shows the run's headline metric (RMSE, lower is
better, in the target's units, for regression) with the values of results.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_regression_sim import breast_cancer
from test_report import assert_pngs_decode_at_stated_size, assert_user_error, needs_matplotlib
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_cli.simulate_cmd import drop_one_lines
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError
from vfl_core.inference.headline import METRICS, choose_metric, headline
from vfl_core.inference.metrics import MetricRow
from vfl_core.inference.subsets import SubsetResult

FAST = ["--representation", "mlp", "--hidden", "16", "--embed-dim", "8", "--batch-size", "64"]
FAST += ["--no-progress", "--threads", "1", "--seed", "0", "--log-level", "error"]


# The commands configure the root logger and torch's thread count process-wide (conftest.py).
pytestmark = pytest.mark.usefixtures("restore_process_state")


def simulate(root: Path, *args: str) -> tuple[Path, str]:
    threads = torch.get_num_threads()
    run = root / "run"
    out = ["--run-dir", str(run), "--out", str(root / "sim.json"), "--eval-every", "1"]
    result = CliRunner().invoke(app, ["simulate", "--epochs", "2", *FAST, *out, *args])
    torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    return run, result.stdout


@pytest.fixture(scope="module")
def diabetes_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`vfl simulate --dataset diabetes --epochs 2 --run-dir D` with 10% missing blocks."""
    root = tmp_path_factory.mktemp("regreport")
    return simulate(root, "--dataset", "diabetes", "--p-miss", "0.1")


def results_of(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def test_given_diabetes_run_when_simulated_then_drop_one_lines_show_rmse_of_the_subsets(
    diabetes_run: tuple[Path, str],
) -> None:
    run, stdout = diabetes_run
    results = results_of(run)
    assert results["task"] == "regression"
    subsets = {tuple(s["blocks"]): s for s in results["subsets"]}
    assert len(subsets) == 15 and all("accuracy" not in s for s in subsets.values())
    full = subsets[(0, 1, 2, 3)]
    assert full["rmse"] == results["test"]["rows"][-1]["rmse"]  # the plain evaluation
    assert 10 < full["rmse"] < 100  # diabetes targets: one decimal place
    for k in range(4):
        rest = subsets[tuple(b for b in range(4) if b != k)]
        line = next(x for x in stdout.splitlines() if x.startswith(f"without party {k}:"))
        change = round(rest["rmse"], 1) - round(full["rmse"], 1)
        match = re.fullmatch(rf"without party {k}: RMSE (\d+\.\d) \(([+-]\d+\.\d)(; .*)?\)", line)
        assert match, line
        assert float(match[1]) == pytest.approx(rest["rmse"], abs=0.05)
        assert float(match[2]) == pytest.approx(rest["rmse"] - full["rmse"], abs=0.05)
        assert abs(float(match[2]) - change) <= 0.1 + 1e-9
    # the epoch log carries the errors; the last evaluation is the final one
    epochs = [json.loads(x) for x in (run / "epochs.jsonl").read_text().splitlines()]
    assert [set(e["test"]) for e in epochs] == [
        {"samples", "rmse", "mae", "r2", "federation_rmse"}
    ] * 2
    assert epochs[-1]["test"]["rmse"] == pytest.approx(full["rmse"])


@needs_matplotlib
def test_given_diabetes_run_when_reporting_then_rmse_figures_and_table_from_results(
    diabetes_run: tuple[Path, str], tmp_path: Path
) -> None:
    run, _ = diabetes_run
    results = results_of(run)
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = (out / "report.html").read_text()
    assert_pngs_decode_at_stated_size(html, out, {"curves", "subsets", "drop_one"})
    overall = results["test"]["rows"][-1]
    assert f"test RMSE {overall['rmse']:.1f} on {overall['samples']} samples" in html
    assert "<h2>Test RMSE by set of parties</h2>" in html
    assert "Lower is better: the lowest RMSE is yellow." in html
    assert "accuracy" not in html.lower().replace("train.", "")  # no classification columns
    header = "<th>samples</th><th>RMSE</th><th>MAE</th><th>R²</th><th>federation RMSE</th>"
    assert header in html
    for row in results["test"]["rows"]:
        cells = [f"{row['rmse']:.1f}", f"{row['mae']:.1f}"]
        cells.append(f"{row['r2']:.3f}" if "r2" in row else "—")
        cells.append(f"{row['federation_rmse']:.1f}")
        tds = "".join(f"<td>{c}</td>" if c == "—" else f"<td class='num'>{c}</td>" for c in cells)
        assert f"<td class='num'>{row['samples']}</td>{tds}</tr>" in html, row


@needs_matplotlib
def test_given_diabetes_run_when_reporting_another_metric_then_only_regression_ones(
    diabetes_run: tuple[Path, str], tmp_path: Path
) -> None:
    run, _ = diabetes_run
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path), "--metric", "r2"])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "report.html").read_text()
    overall = results_of(run)["test"]["rows"][-1]
    assert f"test R² {overall['r2']:.3f} on {overall['samples']} samples" in html
    assert "<h2>Test R² by set of parties</h2>" in html
    for metric in ("accuracy", "f1", "auc"):
        result = CliRunner().invoke(app, ["report", str(run), "--metric", metric])
        assert_user_error(result, f"--metric {metric} is for classification; this regression run")


def test_given_regression_results_without_errors_when_reporting_then_exit_2_naming_the_entry(
    diabetes_run: tuple[Path, str], tmp_path: Path
) -> None:
    results = results_of(diabetes_run[0])
    del results["subsets"][3]["rmse"]
    (tmp_path / "results.json").write_text(json.dumps(results))
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert_user_error(result, "results.json: subsets[3].rmse is not a number")


# ---------------------------------------------------------------- the headline, unit by unit


def test_given_subset_results_when_listing_drop_one_then_headline_and_change_per_task() -> None:
    def subset(blocks: tuple[int, ...], unscored: int, row: MetricRow) -> SubsetResult:
        return SubsetResult.of(blocks, unscored, row)

    reg = [
        subset((0, 1, 2), 0, MetricRow("all", 80, rmse=58.64, mae=50.0)),
        subset((1, 2), 0, MetricRow("all", 80, rmse=57.0, mae=49.0)),
        subset((0, 2), 5, MetricRow("all", 75, rmse=61.31, mae=52.0)),
        subset((0, 1), 80, MetricRow("all", 0)),  # nothing scored without party 2
    ]
    assert drop_one_lines(reg, headline("regression")) == [
        "without party 0: RMSE 57.0 (-1.6)",
        "without party 1: RMSE 61.3 (+2.7; 5 samples unscored without it)",
        "without party 2: nothing scored (80 samples unscored without it)",
    ]
    assert reg[0].to_json() == {
        "blocks": [0, 1, 2],
        "samples": 80,
        "unscored": 0,
        "rmse": 58.64,
        "mae": 50.0,
    }
    cls = [
        subset((0, 1), 0, MetricRow("all", 50, 0.852, 0.86, 0.8, auc=0.9)),
        subset((1,), 1, MetricRow("all", 49, 0.839, 0.84, 0.79, auc=0.88)),
    ]
    assert drop_one_lines(cls, headline("classification")) == [
        "without party 0: accuracy 83.90% (-1.30 points; 1 sample unscored without it)"
    ]
    assert drop_one_lines(cls, METRICS["auc"])[0] == (
        "without party 0: ROC AUC 0.880 (-0.020; 1 sample unscored without it)"
    )


def test_given_metric_names_when_chosen_for_a_task_then_headline_or_clear_refusal() -> None:
    assert choose_metric("regression", None, has_auc=False).key == "rmse"
    assert choose_metric("classification", None, has_auc=True).key == "accuracy"
    assert choose_metric("classification", "auc", has_auc=True).label == "ROC AUC"
    with pytest.raises(ConfigError, match=r"has rmse, mae, r2, federation_rmse$"):
        choose_metric("regression", "f1", has_auc=False)
    with pytest.raises(ConfigError, match=r"has accuracy, federation_accuracy, f1$"):
        choose_metric("classification", "mae", has_auc=False)
    rmse = METRICS["rmse"]
    assert rmse.lower_is_better and rmse.worse(0.5) and not METRICS["f1"].worse(0.5)
    assert rmse.format(0.61234) == "0.612" and rmse.format(1234.5) == "1234.5"
    assert rmse.format_change(-0.0123, 0.61234) == "-0.012"


# ---------------------------------------------------------------- a binary task: ROC AUC


@needs_matplotlib
def test_given_binary_run_when_reporting_auc_then_figures_and_table_show_it(
    tmp_path: Path,
) -> None:
    dirs = prepare_parties(breast_cancer(), tmp_path / "parties", 3, [0.1] * 3, [0.1] * 3, 0.3, 0)
    run, stdout = simulate(tmp_path, *(a for d in dirs for a in ("--data", str(d))))
    assert "without party 2: accuracy" in stdout
    results = results_of(run)
    overall = results["test"]["rows"][-1]
    assert results["task"] == "classification" and 0.5 < overall["auc"] <= 1.0
    assert all("auc" in s for s in results["subsets"] if s["samples"])
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--metric", "auc"])
    assert result.exit_code == 0, result.output
    html = (out / "report.html").read_text()
    assert_pngs_decode_at_stated_size(html, out, {"curves", "subsets", "drop_one"})
    assert f"test ROC AUC {overall['auc']:.3f} on {overall['samples']} samples" in html
    assert "<h2>Test ROC AUC by set of parties</h2>" in html
    assert "<th>F1 %</th><th>ROC AUC</th>" in html
    assert (
        f"<td class='num'>{100 * overall['f1']:.2f}</td><td class='num'>{overall['auc']:.3f}"
        in html
    )
    assert np.isfinite(overall["accuracy"])
