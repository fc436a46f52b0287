"""`vfl bench tabular --quick`: the benchmark the defaults are judged by (issue 27) runs end to
end, in process (and over gRPC, marked slow), and writes a report whose numbers are finite and
sane."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks.tabular.report import ROWS, predicted_positive_rate
from benchmarks.tabular.tables import LABEL_BLOCK, LABEL_COLUMN, K, prepare, tables
from vfl_cli.app import app

LOCAL_ROWS = ("linear", "hgb", "central_mlp", "label_alone", "federation")


def _bench(results: Path, tables_: str, grpc_seeds: str) -> str:
    args = ["bench", "tabular", "--quick", "--tables", tables_, "--grpc-seeds", grpc_seeds]
    args += ["--results", str(results), "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return (results / "tabular_quick.md").read_text()


def _runs(results: Path) -> dict[str, dict]:
    return {
        p.stem: json.loads(p.read_text())
        for p in (results / "runs" / "tabular-quick").glob("*.json")
    }


def test_given_the_parties_csvs_when_read_then_labels_sit_at_party_0_and_overlap_is_partial(
    tmp_path: Path,
) -> None:
    table = tables(None, quick=True)["gen_skewed"](0, True)
    prep = prepare(table, 0, tmp_path)
    header = [p.read_text().splitlines()[0].split(",") for p in prep.split.paths]
    assert [LABEL_COLUMN in h for h in header] == [k == LABEL_BLOCK for k in range(K)]
    assert 0 < prep.split.held.all(axis=0).mean() < 1  # some rows at every party, not all
    assert not set(prep.train_rows) & set(prep.test_rows)
    assert table.categorical  # string categories reach the parties' CSVs
    assert any("grade-" in h for p in prep.split.paths for h in p.read_text().splitlines()[1:3])
    assert len(prep.test_rows) == len(prep.parties[LABEL_BLOCK].splits["test"].ids)


def test_quick_benchmark_in_process_writes_every_row_with_sane_numbers(tmp_path: Path) -> None:
    text = _bench(tmp_path, "breast_cancer,diabetes", "")
    for table in ("breast_cancer", "diabetes"):
        assert f"## {table}" in text
        section = text.split(f"## {table}")[1].split("## ")[0]
        assert "**Verdict:**" in section
        for row in LOCAL_ROWS:
            assert re.search(rf"^\| {row} \| 1 \|", section, re.M), (table, row)
        assert "Per observed set:" in section and "| 0,1,2 |" in section
    runs = _runs(tmp_path)
    cancer = {r["row"]: r for r in runs["breast_cancer-s0-local"]["rows_run"]}
    assert set(cancer) == set(LOCAL_ROWS)
    assert cancer["hgb"]["scores"]["all"]["accuracy"] > 0.9
    for row in cancer.values():
        overall = row["scores"]["all"]
        assert 0.5 < overall["accuracy"] <= 1 and 0.5 < overall["auc"] <= 1
        assert math.isfinite(row["seconds"]) and row["seconds"] >= 0
        # every row scores the same test rows
        assert overall["samples"] == cancer["hgb"]["scores"]["all"]["samples"]
    diabetes = {r["row"]: r["scores"]["all"] for r in runs["diabetes-s0-local"]["rows_run"]}
    labels = np.asarray(tables(None, True)["diabetes"](0, True).label)
    for row, scores in diabetes.items():
        # better than predicting nothing useful, worse than impossible
        assert 0 < scores["rmse"] < 1.2 * labels.std(), row
        assert scores["mae"] <= scores["rmse"]


@pytest.mark.slow
def test_quick_benchmark_over_grpc_matches_the_in_process_rows(tmp_path: Path) -> None:
    text = _bench(tmp_path, "breast_cancer", "0")
    assert re.search(r"^\| federation_grpc \| 1 \|", text, re.M)
    runs = _runs(tmp_path)
    grpc = runs["breast_cancer-s0-grpc"]["rows_run"][0]
    local = {r["row"]: r for r in runs["breast_cancer-s0-local"]["rows_run"]}
    assert grpc["row"] == "federation_grpc" and grpc["row"] in ROWS
    assert grpc["scores"]["all"]["samples"] == local["federation"]["scores"]["all"]["samples"]
    assert grpc["scores"]["all"]["accuracy"] > 0.85
    assert grpc["epochs"] == local["federation"]["epochs"]


def test_the_predicted_positive_rate_is_recovered_from_accuracy_and_f1() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        y = rng.random(200) < rng.uniform(0.05, 0.6)
        predicted = rng.random(200) < rng.uniform(0.05, 0.9)
        tp = np.mean(y & predicted)
        f1 = 2 * tp / (np.mean(y) + np.mean(predicted))
        if f1 >= 1:
            continue
        rate = predicted_positive_rate(float(np.mean(y == predicted)), float(f1), float(np.mean(y)))
        assert rate == pytest.approx(np.mean(predicted), abs=1e-9)
