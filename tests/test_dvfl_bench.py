"""`vfl bench dvfl` end to end on digits (tiny), and the DVFL options of the commands: every cell
is run once and cached, the report has each table and the paper's numbers, bad options are one
line; `--fault-entity` names what fails and is refused for methods without hosts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vfl_cli.app import app

pytestmark = pytest.mark.usefixtures("restore_process_state")


def test_given_digits_when_dvfl_benchmark_runs_then_cells_are_cached_and_reported(
    tmp_path: Path,
) -> None:
    args = [
        "bench", "dvfl", "--dataset", "digits", "--seeds", "0", "--epochs", "1",
        "--owner-epochs", "2", "--experiments", "faults,period", "--methods", "dvfl,svfl",
        "--rejoin", "0.1", "--host-rejoin", "0.5", "--periods", "1,4", "--jobs", "0",
        "--no-progress", "--results", str(tmp_path),
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    runs = sorted((tmp_path / "runs" / "dvfl-digits").glob("*.json"))
    # dvfl: none (= period 1), guest, host, link, period 4; svfl: none, guest, host
    assert len(runs) == 8
    text = (tmp_path / "dvfl_digits.md").read_text()
    faults = text.split("## Faults")[1].split("Failures injected")[0]
    assert "| DVFL |" in faults and "= guest" in faults  # split learning's link = guest loss
    assert faults.count("(1)") == 4 + 3  # every cell run, one seed each
    assert "97.58" in text and "80.22" in text  # the paper's numbers beside ours
    period = text.split("## Communication period")[1]
    assert "| 1 |" in period and "| 4 |" in period
    assert (tmp_path / "dvfl_digits.png").exists()
    stamps = [p.stat().st_mtime_ns for p in runs]
    again = CliRunner().invoke(app, args)  # cached runs are not run again
    assert again.exit_code == 0 and [p.stat().st_mtime_ns for p in runs] == stamps


@pytest.mark.parametrize(
    "bad",
    [["--experiments", "nothing"], ["--rejoin", "0"], ["--dataset", "credit"], ["--methods", "x"]],
)
def test_given_bad_dvfl_bench_options_then_one_error_line(tmp_path: Path, bad: list[str]) -> None:
    result = CliRunner().invoke(app, ["bench", "dvfl", "--results", str(tmp_path), *bad])
    assert result.exit_code == 2, (bad, result.output)
    assert "error:" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "laser", "--fault-entity", "host"], "needs --method dvfl"),
        (["--method", "dvfl", "--fault-entity", "guests"], "--fault-entity must be one of"),
    ],
)
def test_given_a_fault_entity_the_method_lacks_when_simulating_then_one_error_line(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(app, ["simulate", "--epochs", "1", "--fault-rate", "0.3", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_given_dvfl_options_when_simulating_then_they_reach_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [
        "simulate", "--method", "dvfl", "--epochs", "1", "--dvfl-owner-epochs", "2",
        "--dvfl-period", "3", "--dvfl-host-steps", "1", "--fault-rate", "0.3",
        "--dvfl-owner-patience", "1", "--dvfl-owner-min-epochs", "2",
        "--fault-entity", "link", "--run-dir", str(run_dir),
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    config = (run_dir / "config.json").read_text()
    assert '"period": 3' in config and '"owner_epochs": 2' in config and '"host_steps": 1' in config
    assert '"entity": "link"' in config
    assert '"owner_patience": 1' in config and '"owner_min_epochs": 2' in config
    assert "all" in result.output and "injected faults" in result.output


def test_given_an_owner_minimum_beyond_its_epochs_when_simulating_then_one_error_line() -> None:
    args = ["simulate", "--method", "dvfl", "--epochs", "1", "--dvfl-owner-epochs", "2"]
    result = CliRunner().invoke(app, [*args, "--dvfl-owner-min-epochs", "5"])
    assert result.exit_code == 2, result.output
    assert "owner_min_epochs" in result.output and "Traceback" not in result.output


def test_the_few_label_dvfl_min_cell_differs_from_dvfl_only_in_the_owner_minimum() -> None:
    from benchmarks.dvfl import LABEL_MIN_EPOCHS, Cell, DvflJob

    job = DvflJob(seeds=[0], results=Path("."), data_path=None, experiments=("labels",))
    plain, least = (job.config(Cell(m, labels=128), 0) for m in ("dvfl", "dvfl-min"))
    assert least["train"]["method"] == "dvfl"
    assert least["train"]["dvfl"].pop("owner_min_epochs") == LABEL_MIN_EPOCHS
    assert least == plain
    assert "owner_min_epochs" not in plain["train"]["dvfl"]  # the paper's cells keep their runs
