"""Defects found by the third outsider pass over tables nobody here wrote (issue 27,
benchmarks/results/outsider_tables.md): each found shape as a small table, checked fast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vfl_core.data.tabular import TableSource, load_table_party


def regression(path: Path) -> TableSource:
    return TableSource(
        path=path, id_column="id", label_column="y", block=0, num_blocks=2,
        test_fraction=0.2, task="regression",
    )  # fmt: skip


def write_targets(path: Path, targets: np.ndarray) -> Path:
    rows = "".join(f"{i},{i % 7},{t!r}\n" for i, t in enumerate(targets.tolist()))
    path.write_text("id,a,y\n" + rows, encoding="utf-8")
    return path


def test_given_a_few_huge_regression_targets_then_warned_with_count_values_and_share(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 6 of 1500 targets typed x1000: every model's R^2 was ~0, with no word why
    rng = np.random.default_rng(0)
    y = rng.normal(0, 100, 1500)
    y[[10, 200, 400, 700, 900, 1300]] *= 1000
    with caplog.at_level("WARNING"):
        load_table_party(regression(write_targets(tmp_path / "t.csv", y)))
    said = [m for m in caplog.messages if "median absolute deviations" in m]
    assert len(said) == 1, caplog.text  # the training rows only, not again for the test rows
    assert "label column 'y':" in said[0] and "training targets lie more than 20" in said[0]
    assert "% of the targets' variance" in said[0] and "a log" in said[0]
    far = int(said[0].split(": ")[2].split(" of ")[0])
    assert 1 <= far <= 6, said[0]  # those of the 6 that fell in the training rows


@pytest.mark.parametrize("kind", ["normal", "uniform", "counts"])
def test_given_ordinary_regression_targets_then_no_far_target_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    rng = np.random.default_rng(1)
    y = {
        "normal": rng.normal(500, 100, 800),
        "uniform": rng.uniform(0, 1, 800),
        "counts": rng.poisson(np.exp(rng.normal(0.5, 0.8, 800))).astype(float),
    }[kind]
    with caplog.at_level("WARNING"):
        load_table_party(regression(write_targets(tmp_path / "t.csv", y)))
    assert "median absolute deviations" not in caplog.text, caplog.text
