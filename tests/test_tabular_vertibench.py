"""The VertiBench grid's pieces (issue 45 item 4): the splits deal every column of a table to
exactly one of the K parties, none empty, the same for the same seed; a small Dirichlet alpha
gives one party most columns where a large one shares them; the correlation splits differ with
beta. The grid's skewed regressions are positive and skewed, so that the log target's rule takes
them, and the benchmark's own tables are unchanged (they are not in `vfl bench tabular`)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.tabular.tables import EXTRA_TABLES, K, tables
from vfl_core.data.learning_task import wants_log


def test_given_the_extra_tables_then_positive_skewed_regressions_outside_the_benchmark() -> None:
    assert not set(EXTRA_TABLES) & set(tables(None, True))
    every = tables(None, True, extra=True)
    for name in EXTRA_TABLES:
        table = every[name](0, True)
        assert table.task == "regression" and table.categorical
        assert table.label.min() >= 0 and wants_log(table.label)
        again = every[name](0, True)
        np.testing.assert_array_equal(again.label, table.label)  # the seed fixes it


def test_given_importance_splits_then_a_partition_and_alpha_sets_the_balance() -> None:
    pytest.importorskip("vertibench", reason="the VertiBench splits need the bench extra")
    from benchmarks.tabular.vertibench import split_blocks

    table = tables(None, True)["gen_categorical"](0, True)
    spread = {}
    for split in ("importance-0.1", "importance-100"):
        sizes = []
        for seed in range(6):
            blocks = split_blocks(table, split, seed)
            assert len(blocks) == K and all(blocks)
            flat = [c for b in blocks for c in b]
            assert sorted(flat) == sorted(table.columns)
            assert split_blocks(table, split, seed) == blocks
            sizes.append(max(len(b) for b in blocks))
        spread[split] = np.mean(sizes)
    assert spread["importance-0.1"] > spread["importance-100"]  # one party holds more


def test_given_correlation_splits_then_equal_shares_that_beta_moves() -> None:
    pytest.importorskip("vertibench", reason="the VertiBench splits need the bench extra")
    from benchmarks.tabular.vertibench import split_blocks

    table = tables(None, True)["gen_skewed"](0, True)
    low = split_blocks(table, "correlation-0", 0)
    high = split_blocks(table, "correlation-1", 0)
    for blocks in (low, high):
        assert sorted(len(b) for b in blocks) == [4, 4, 4]
        assert sorted(c for b in blocks for c in b) == sorted(table.columns)
    assert {frozenset(b) for b in low} != {frozenset(b) for b in high}


def test_given_a_four_party_split_then_four_party_files_and_the_fourth_misses_rows(
    tmp_path,
) -> None:
    pytest.importorskip("vertibench", reason="the VertiBench splits need the bench extra")
    from benchmarks.tabular.tables import LABEL_BLOCK, MISSING, write_parties
    from benchmarks.tabular.vertibench import parties, split_blocks

    assert parties("importance-1-4p") == K + 1 and parties("importance-1") == K
    table = tables(None, True)["gen_categorical"](0, True)
    blocks = split_blocks(table, "importance-1-4p", 0)
    assert len(blocks) == 4 and all(blocks)
    assert sorted(c for b in blocks for c in b) == sorted(table.columns)
    split = write_parties(table, 0, tmp_path, blocks=blocks)
    assert len(split.paths) == 4 and all(p.is_file() for p in split.paths)
    assert split.held.shape == (4, table.rows)
    share = 1 - split.held.mean(axis=1)
    assert abs(share[3] - MISSING[-1]) < 0.06 and abs(share[LABEL_BLOCK] - MISSING[0]) < 0.06
    # three parties: the same rows as before the fourth existed (the first three draws)
    three = write_parties(
        table, 0, tmp_path / "three", blocks=split_blocks(table, "importance-1", 0)
    )
    np.testing.assert_array_equal(three.held, split.held[:3])


def _cell(rows: dict[str, float], grpc: float | None = None) -> dict:
    """A grid cell's file as the worker writes it (classification accuracies, one seed)."""
    run = []
    for name, accuracy in rows.items():
        row = {"row": name, "scores": {"all": {"accuracy": accuracy}}, "cpu_seconds": 0.1}
        if name in ("federation", "splitnn", "zerofill"):
            row |= {"rounds": [5, 5], "epoch_cpu_seconds": [0.1, 0.1], "wall_seconds": 1.0}
            row |= {"epochs": 2, "early_stop": None}
        run.append(row)
    if grpc is not None:
        run.append(
            {
                "row": "federation_grpc",
                "scores": {"all": {"accuracy": grpc}},
                "rounds": [5, 5],
                "epochs": 2,
                "seconds": 3.0,
            }
        )
    return {"task": "classification", "rows_run": run}


def test_given_cells_then_the_summary_says_the_bar_the_reason_and_the_grpc_rows(
    tmp_path, monkeypatch
) -> None:
    import json

    from benchmarks.tabular import vertibench

    grid = tmp_path / "tabular-vertibench"
    scores = {"splitnn": 0.70, "label_alone": 0.6, "linear": 0.71, "hgb": 0.74, "lgbm": 0.75}
    (grid / "t").mkdir(parents=True)
    (grid / "t" / "importance-1-s0.json").write_text(
        json.dumps(_cell({"federation": 0.72, **scores}, grpc=0.72))
    )
    (grid / "t" / "correlation-0-s0.json").write_text(
        json.dumps(_cell({"federation": 0.748, **scores}))
    )
    monkeypatch.setitem(vertibench.REASONS, ("t", "importance-1"), "the fusion, measured")
    out = vertibench.summarise(grid)
    assert "| importance-1 | 1 | 72.00 |" in out and "no (-3.00 points)" in out
    assert "the fusion, measured" in out  # the reason beside the missed cell only
    assert "yes (-0.20 points)" in out
    assert "Cells (table, split) within the bar of LightGBM: 1 of 2" in out
    assert "| t | importance-1-s0 | 72.0000 | 72.0000 | 2 / 2 | 10 / 10 |" in out
    # a diagnosis run renders each row's gap to LightGBM
    diag = tmp_path / vertibench.DIAGNOSIS_DIR / "t"
    diag.mkdir(parents=True)
    (diag / "importance-1-s0.json").write_text(
        json.dumps(_cell({"federation": 0.72, "zerofill": 0.76, "lgbm": 0.75}))
    )
    said = vertibench.diagnosis(diag.parent)
    assert "72.00 (-3.00, 10 rounds)" in said and "76.00 (+1.00, 10 rounds)" in said
    # counted as the grid counts the federation: splitnn and linear from the grid's cell
    counted = vertibench.counts(diag.parent, grid)
    assert "| federation | 1 | 0 | 1 | 1 | 10 (10.0) |" in counted  # 72: 3 points below
    assert "| zerofill | 1 | 1 | 1 | 1 | 10 (10.0) |" in counted
    # and per cell, the lines each row misses
    lines = vertibench.missed(diag.parent, grid)
    assert "| t | importance-1 | bar | - |" in lines
    # and per table: the row's mean over the table's cells against splitnn's (70 here)
    table = vertibench.by_table(diag.parent, grid, "zerofill")
    assert "| t | 1 | 1 | 1 | 1 | 76.000 | 70.000 | yes |" in table
    section = "\n".join(vertibench.report_section(grid))
    assert "--grpc t/importance-1" in section and "--rows federation zerofill lgbm" in section


def test_given_a_lanes_run_then_each_rule_reads_the_linear_heads_or_the_federation(
    tmp_path,
) -> None:
    """benchmarks.tabular.linear_rules: a run whose lin4 row took the linear heads (their
    validation Brier score 0.09, LASER-VFL's 0.10, the concatenating heads' 0.095, each error
    0.01): the rules that take them count its test score (76, within LightGBM's 75 bar), the
    narrower ones the federation's (72); a rule wider than the run's is refused."""
    import json

    from benchmarks.tabular import linear_rules

    grid, run = tmp_path / "grid", tmp_path / "run"
    scores = {"splitnn": 0.70, "linear": 0.71, "lgbm": 0.75}
    (grid / "t").mkdir(parents=True)
    (grid / "t" / "importance-1-s0.json").write_text(
        json.dumps(_cell({"federation": 0.72, **scores}))
    )
    cell = _cell({"federation": 0.72, "lin4": 0.76})
    lanes = cell["rows_run"][1]
    lanes["pooled"] = [
        {"value": 0.10, "error": 0.01},
        {"value": 0.095, "error": 0.01, "head": "concat"},
        {"value": 0.09, "error": 0.01, "head": "linear"},
    ]
    lanes["heads"] = [{"observed": [0], "head": "linear"}]
    (run / "t").mkdir(parents=True)
    (run / "t" / "importance-1-s0.json").write_text(json.dumps(cell))
    out = linear_rules.table(run, grid, "lin4").splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out[2:]}
    assert rows["never (the defaults before)"].endswith("| 0 | 0 | 1 | 1 | - |")
    assert rows["better than both (the defaults)"].endswith("| 1 | 1 | 1 | 1 | t 1 |")
    by_error = "better than both by its standard error (the concatenating head's rule)"
    assert rows[by_error].endswith("| 0 | 0 | 1 | 1 | - |")  # 0.005 short of 0.01
    lanes["heads"] = []  # the run did not take them: no test score for a rule that would
    (run / "t" / "importance-1-s0.json").write_text(json.dumps(cell))
    with pytest.raises(ValueError, match="narrower"):
        linear_rules.table(run, grid, "lin4")


def test_given_a_blend_run_then_each_rule_reads_the_blend_or_the_defaults(tmp_path) -> None:
    """benchmarks.tabular.blend_rules: a run that took the heads' blend (validation Brier score
    0.085 against LASER-VFL's 0.10, the concatenating heads' 0.095 and the linear heads' 0.09,
    each error 0.01): the rules that take it count its test score (76, within LightGBM's bar),
    the others the defaults' (72: the linear heads, better than both, as the lanes run read
    them); a run whose training differs from the lanes run's is refused."""
    import json

    from benchmarks.tabular import blend_rules

    grid, run, lanes = tmp_path / "grid", tmp_path / "run", tmp_path / "lanes"
    scores = {"splitnn": 0.70, "linear": 0.71, "lgbm": 0.75}
    for root in (grid, run, lanes):
        (root / "t").mkdir(parents=True)
    (grid / "t" / "importance-1-s0.json").write_text(
        json.dumps(_cell({"federation": 0.70, **scores}))
    )
    pooled = [
        {"value": 0.10, "error": 0.01},
        {"value": 0.095, "error": 0.01, "head": "concat"},
        {"value": 0.09, "error": 0.01, "head": "linear"},
    ]
    before = _cell({"federation": 0.70, "lin4": 0.72})
    before["rows_run"][1] |= {"pooled": pooled, "heads": [{"observed": [0], "head": "linear"}]}
    (lanes / "t" / "importance-1-s0.json").write_text(json.dumps(before))
    cell = _cell({"blend": 0.76})
    cell["rows_run"][0]["pooled"] = [*pooled, {"value": 0.085, "error": 0.01, "head": "blend"}]
    (run / "t" / "importance-1-s0.json").write_text(json.dumps(cell))
    out = blend_rules.table(run, lanes, grid).splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out[2:]}
    assert rows["never (the defaults before)"].endswith("| 0 | 0 / 0 / 0 | 0 | 1 | 1 | - |")
    every = "better than every other candidate"
    assert rows[every].endswith("| 1 | 1 / 0 / 0 | 1 | 1 | 1 | t 1 |")
    picked = "better than the heads picked without it (the defaults)"  # the linear heads'
    assert rows[picked].endswith("| 1 | 1 / 0 / 0 | 1 | 1 | 1 | t 1 |")
    assert rows[f"{every} by its standard error"].endswith("| 0 | 0 / 0 / 0 | 0 | 1 | 1 | - |")
    cell["rows_run"][0]["pooled"][0]["value"] = 0.11  # another training than the lanes run's
    (run / "t" / "importance-1-s0.json").write_text(json.dumps(cell))
    with pytest.raises(ValueError, match="training differs"):
        blend_rules.table(run, lanes, grid)


def test_given_a_run_with_the_blend_anywhere_then_each_rule_reads_it_or_the_defaults(
    tmp_path,
) -> None:
    """benchmarks.tabular.blend_margin: the defaults picked the linear heads (validation Brier
    score 0.090 against the blend's 0.092, each error 0.01) and scored 72; the run that took the
    blend anywhere scored 76 (within LightGBM's bar). The rules that take the blend within half
    or one of the pick's standard error count 76, the defaults' rule 72; a run whose training
    differs is refused."""
    import json

    from benchmarks.tabular import blend_margin

    grid, defaults, anywhere = tmp_path / "grid", tmp_path / "defaults", tmp_path / "anywhere"
    for root in (grid, defaults, anywhere):
        (root / "credit").mkdir(parents=True)
    scores = {"splitnn": 0.70, "linear": 0.71, "lgbm": 0.75}
    (grid / "credit" / "importance-1-s0.json").write_text(
        json.dumps(_cell({"federation": 0.70, **scores}))
    )
    pooled = [
        {"value": 0.10, "error": 0.01},
        {"value": 0.095, "error": 0.01, "head": "concat"},
        {"value": 0.09, "error": 0.01, "head": "linear"},
        {"value": 0.092, "error": 0.01, "head": "blend"},
    ]
    for root, accuracy in ((defaults, 0.72), (anywhere, 0.76)):
        cell = _cell({"federation": accuracy})
        cell["rows_run"][0]["pooled"] = pooled
        (root / "credit" / "importance-1-s0.json").write_text(json.dumps(cell))
    out = blend_margin.table(defaults, anywhere, grid).splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out[2:]}
    assert rows["better than the heads picked without it (the defaults)"].endswith(
        "| 0 | 0 / 0 / 0 | 0 | 1 | 1 | - |"
    )
    half = "unless the pick beats it by half the pick's standard error"
    assert rows[half].endswith("| 1 | 1 / 0 / 0 | 1 | 1 | 1 | credit 1 |")
    assert rows["wherever it is a candidate"].endswith("| 1 | 1 / 0 / 0 | 1 | 1 | 1 | credit 1 |")
    cell["rows_run"][0]["pooled"] = [{**pooled[0], "value": 0.11}, *pooled[1:]]
    (anywhere / "credit" / "importance-1-s0.json").write_text(json.dumps(cell))
    with pytest.raises(ValueError, match="training differs"):
        blend_margin.table(defaults, anywhere, grid)


def test_given_runs_of_the_defaults_then_rounds_against_issue43_and_runs_against_an_earlier(
    tmp_path,
) -> None:
    """benchmarks.tabular.against: credit's cell trains 10 rounds (0.2 CPU s) against issue
    43's 12 (0.3 s); diabetes' issue 43 run is the `issue43_small` row of the second run (30
    rounds), not the first run's. Against an earlier run of the defaults: credit better on test
    (0.72 against 0.70), diabetes worse (RMSE 58 against 57), both with the same rounds."""
    import json

    from benchmarks.tabular import against

    run, small, old = tmp_path / "run", tmp_path / "small", tmp_path / "old"
    for root in (run, small, old):
        for table in ("credit", "diabetes"):
            (root / table).mkdir(parents=True)

    def row(name: str, score: dict, rounds: list[int], cpu: list[float]) -> dict:
        return {"row": name, "scores": {"all": score}, "rounds": rounds, "epoch_cpu_seconds": cpu}

    def write(root, table: str, task: str, *rows: dict) -> None:
        cell = {"task": task, "rows_run": list(rows)}
        (root / table / "importance-1-s0.json").write_text(json.dumps(cell))

    acc, rmse = {"accuracy": 0.72}, {"rmse": 58.0}
    write(run, "credit", "classification", row("federation", acc, [5, 5], [0.1, 0.1]),
          row("issue43", acc, [6, 6], [0.15, 0.15]))  # fmt: skip
    write(run, "diabetes", "regression", row("federation", rmse, [5, 5], [0.1, 0.1]),
          row("issue43", rmse, [5, 5], [0.1, 0.1]))  # fmt: skip
    write(small, "diabetes", "regression", row("issue43_small", rmse, [15, 15], [0.2, 0.2]))
    write(old, "credit", "classification", row("federation", {"accuracy": 0.70}, [5, 5], [1, 1]))
    write(old, "diabetes", "regression", row("federation", {"rmse": 57.0}, [5, 5], [1, 1]))
    lines = against.rounds_table(run, small).splitlines()
    assert lines[2].split(" | ")[1:] == [
        *("10 (10.0)", "12 (12.0)", "0.20 (0.20)", "0.30 (0.30)", "0.67x", "1 / 0", "1 / 0 / 0 |")
    ]
    assert lines[3].startswith("| diabetes | 10 (10.0) | 30 (30.0) | 0.20 (0.20) | 0.40 (0.40)")
    assert lines[4].startswith("| **all 2 runs** | 10 (10.0) | 21 (21.0) |")
    lines = against.runs_table(run, old).splitlines()
    assert lines[2:] == [
        "| credit | 1 | 1 | 1 / 0 / 0 |",
        "| diabetes | 1 | 1 | 0 / 1 / 0 |",
        "| **all** | 2 | 2 | 1 / 1 / 0 |",
    ]
