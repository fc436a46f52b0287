"""`vfl bench wan --tables`: the figures of a run, the order of the cells and the acceptance
lines of its report, on made-up records (no federation is started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_config import invoke

from benchmarks.wan.tables import (
    RECIPES,
    TablesJob,
    aggregate,
    cells,
    checks,
    rtts_per_round,
    section,
    summarise,
)
from vfl_cli import coordinator_cmd


def _row(recipe: str, rtt: float, to_model: float, ms: float, seed: int = 0, acc: float = 0.8):
    return {
        "table": "credit", "recipe": recipe, "rtt_ms": rtt, "seed": seed,
        "rounds_to_model": 40, "best_epoch": 8, "epochs": 14, "to_model_s": to_model,
        "trained_s": 2 * to_model, "rounds_s_to_model": to_model / 2, "ms_per_round": ms,
        "bytes_to_model": 2**20,
        "scores": {"accuracy": acc, "f1": 0.5, "auc": 0.75},
    }  # fmt: skip


def test_given_a_run_record_and_epoch_marks_when_summarised_then_it_stops_at_the_best_epoch():
    results = {
        "epochs": [
            {"rounds": 5, "trained_rounds": 4, "seconds": 2.0},
            {"rounds": 5, "trained_rounds": 4, "seconds": 3.0},
            {"rounds": 5, "trained_rounds": 4, "seconds": 3.0},
        ],
        "early_stop": {"best_epoch": 2},
        "config": {"train": {"batch_size": 5000}},
        "test": {
            "rows": [{"observed": "0", "accuracy": 0.1}, {"observed": "all", "accuracy": 0.8}]
        },
    }
    # epoch lines at 10, 14 and 18 s (validation took 1 s after each epoch); 100 bytes a round
    out = summarise(results, [10.0, 14.0, 18.0], [1000, 1400, 1800])
    assert out["rounds_to_model"] == 8 and out["rounds"] == 12 and out["best_epoch"] == 2
    assert out["to_model_s"] == pytest.approx(6.0)  # from 8 s, the first epoch's start
    assert out["trained_s"] == pytest.approx(10.0) and out["rounds_s_to_model"] == 5.0
    assert out["ms_per_round"] == pytest.approx(1000 * 8 / 12)
    assert out["bytes_per_round"] == pytest.approx(100) and out["bytes_to_model"] == 800
    assert out["scores"]["accuracy"] == 0.8 and out["scores"]["auc"] is None
    # where the time went: launched at 3 s, exited at 21 s
    spent = summarise(results, [10.0, 14.0, 18.0], [0, 0, 0], (3.0, 21.0))
    assert spent["setup_s"] == pytest.approx(5.0) and spent["rounds_s"] == 8.0
    assert spent["boundaries_s"] == pytest.approx(2.0) and spent["final_s"] == pytest.approx(3.0)
    assert spent["wall_s"] == pytest.approx(18.0)  # launched to exited: a usable model
    # no early stopping: the model is the last epoch's
    results["early_stop"] = None
    assert summarise(results, [10.0, 14.0, 18.0], [0, 0, 0])["rounds_to_model"] == 12


def test_given_a_grid_when_ordered_then_the_acceptance_cells_come_first():
    job = TablesJob(Path("."), Path("."), rtts_ms=(0.0, 10.0, 50.0), recipes=("local4", "direct"))
    order = cells(job)
    assert order[:4] == [
        ("credit", "direct", 0.0, 0),
        ("credit", "direct", 50.0, 0),
        ("census_like", "direct", 0.0, 0),
        ("census_like", "direct", 50.0, 0),
    ]
    assert [c[1] for c in order[4:8]] == ["local4"] * 4 and {c[2] for c in order[4:8]} == {0, 50}
    assert order[8] == ("credit", "direct", 10.0, 0) and len(order) == 12


def test_given_seeds_when_aggregated_then_means_per_cell():
    means = aggregate([_row("defaults", 0, 10.0, 100.0), _row("defaults", 0, 14.0, 120.0, 1, 0.9)])
    cell = means["credit", "defaults", 0.0]
    assert cell["seeds"] == 2 and cell["to_model_s"] == 12.0 and cell["ms_per_round"] == 110.0
    assert cell["accuracy"] == pytest.approx(0.85)


def test_given_the_acceptance_cells_when_checked_then_each_line_says_whether_it_holds():
    means = aggregate(
        [
            _row("defaults", 0, 10.0, 50.0),
            _row("defaults", 50, 20.0, 150.0),  # 2.0x: does not hold
            _row("direct", 0, 10.0, 50.0),
            _row("direct", 50, 14.0, 105.0),  # 1.4x; 1.1 RTT a round
            _row("direct", 100, 18.0, 180.0),  # 1.3 RTT a round
            _row("split-nn", 50, 16.0, 140.0, acc=0.79),
        ]
    )
    assert rtts_per_round(means["credit", "direct", 50.0], means["credit", "direct", 0.0], 50) == (
        pytest.approx(1.1)
    )
    lines = checks(means, "credit")
    assert "2.00x RTT 0's" in lines[0] and lines[0].endswith("does not hold)")
    assert "20.0 s against 16.0 s (at most: does not hold)" in lines[1]
    assert "1.40x" in lines[2] and lines[2].endswith("holds)")
    assert (
        "14.0 s against 16.0 s (at most: holds)" in lines[3] and "80.00 against 79.00" in lines[3]
    )
    # the round's cost per RTT: the defaults' (the plane auto chose) and direct's
    assert "`defaults` at RTT 50" in lines[4] and "2.00 RTT" in lines[4]
    assert lines[4].endswith("does not hold)")
    assert "RTT 50" in lines[5] and "1.10 RTT" in lines[5] and lines[5].endswith("holds)")
    assert "RTT 100" in lines[6] and "1.30 RTT" in lines[6] and "does not hold" in lines[6]
    assert checks(aggregate([_row("direct", 0, 1.0, 1.0)]), "credit")[0].endswith("not run")


def test_given_a_record_when_rendered_then_rows_hgb_and_checks_are_in_its_section():
    record = {
        "label": "t", "code": "abc", "finished": "now", "command": "vfl bench wan --tables credit",
        "machine": {"cores": 2, "torch": "2"}, "load_average": [1.0, 2.0], "seconds": 600,
        "job": {"kind": "tables", "mbit": 100.0, "recipes": {"defaults": []}},
        "rows": [_row("defaults", 0, 10.0, 50.0), _row("defaults", 50, 12.0, 70.0)],
        "hgb": [{"table": "credit", "seed": 0, "fit_s": 0.5, "scores": {"accuracy": 0.82}}],
        "not_run": [["credit", "direct", 100.0, 0]],
    }  # fmt: skip
    text = "\n".join(section(record))
    assert "| `defaults` | 50 | 40 | 8 / 14 | 12.0 | 1.20 | 6.0 | 24.0 |" in text
    assert "+20.0 (0.40 RTT)" in text and "HistGradientBoosting (central)" in text
    assert "credit `direct` RTT 100 seed 0" in text and "1.20x RTT 0's" in text


def test_given_bad_table_options_when_bench_wan_runs_then_one_error_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vfl_cli.app import app

    base = ["bench", "wan", "--results", str(tmp_path)]
    result = CliRunner().invoke(app, [*base, "--tables", "credit,mnist"])
    assert result.exit_code == 2 and "unknown table(s) ['mnist']" in result.output
    result = CliRunner().invoke(app, [*base, "--tables", "census_like", "--recipes", "fast"])
    assert result.exit_code == 2 and "unknown recipe(s)" in result.output
    result = CliRunner().invoke(app, [*base, "--tables", "census_like", "--bandwidths", "100,10"])
    assert result.exit_code == 2 and "one positive --bandwidths" in result.output
    result = CliRunner().invoke(app, [*base, "--tables", "credit", "--data-path", str(tmp_path)])
    assert result.exit_code == 2 and "no data for table(s) ['credit']" in result.output


def test_given_each_recipe_when_parsed_as_coordinator_options_then_it_sets_what_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configs = {
        name: invoke(monkeypatch, coordinator_cmd, list(args)) for name, args in RECIPES.items()
    }
    f16, stale5 = configs["direct-stale3-overlap-f16"], configs["direct-stale5-overlap"]
    assert f16.train.wire_dtype == "float16" and stale5.train.wire_dtype == "float32"
    assert (f16.train.staleness, stale5.train.staleness) == (3, 5)
    for cfg in (f16, stale5):
        assert cfg.train.data_plane == "direct" and cfg.train.overlap_validation
