"""Shapes of tables nobody here wrote (issue 27, benchmarks/results/outsider_tables.md), each
found shape as a small table, checked fast."""

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


def binary(path: Path, positive: str | None = None) -> TableSource:
    return TableSource(
        path=path, id_column="id", label_column="y", block=0, num_blocks=2,
        test_fraction=0.2, positive_class=positive,
    )  # fmt: skip


def write_labels(path: Path, labels: list[str]) -> Path:
    rows = "".join(f"{i},{i % 7},{label}\n" for i, label in enumerate(labels))
    path.write_text("id,a,y\n" + rows, encoding="utf-8")
    return path


def test_given_the_positive_class_is_the_common_one_then_warned_naming_the_rare_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # fraud/ok sorts "ok" last: F1 97.8 was about the 96% "ok", nothing said of the frauds
    path = write_labels(tmp_path / "t.csv", ["fraud" if i % 10 == 0 else "ok" for i in range(300)])
    with caplog.at_level("WARNING"):
        load_table_party(binary(path))
    said = [m for m in caplog.messages if "holds" in m and "positive class" in m]
    assert len(said) == 1, caplog.text  # the training rows only
    assert "the positive class 'ok'" in said[0] and "'fraud' 10." in said[0], said[0]
    assert "--positive-class fraud makes them about the rare one" in said[0]
    caplog.clear()
    with caplog.at_level("WARNING"):
        load_table_party(binary(path, positive="ok"))  # the user chose it: not warned
        load_table_party(binary(path, positive="fraud"))
        balanced = ["yes" if i % 3 else "no" for i in range(300)]  # 'yes' 67%: not warned
        load_table_party(binary(write_labels(tmp_path / "b.csv", balanced)))
    assert "positive class" not in caplog.text, caplog.text


def test_given_a_class_of_one_training_row_when_simulated_then_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # vfl-client and vfl prepare said so; vfl simulate (the pass's 20 classes) did not
    from typer.testing import CliRunner

    from vfl_cli.app import app

    labels = [f"k{i % 4}" for i in range(120)]
    labels[5] = "k9"  # a stray class; id 5 is a training row (not in the test split by hash)
    p0 = write_labels(tmp_path / "p0.csv", labels)
    p1 = tmp_path / "p1.csv"
    p1.write_text("id,b\n" + "".join(f"{i},{i % 5}\n" for i in range(120)), encoding="utf-8")
    args = ["simulate", "--data", str(p0), "--data", str(p1), "--id-column", "id"]
    args += ["--label-column", "y", "--epochs", "1", "--out", str(tmp_path / "r.json")]
    with caplog.at_level("WARNING"):
        result = CliRunner().invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "block 0: class 4 ('k9') has only 1 training row" in caplog.text, caplog.text


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--p-miss", "0.3"], "--p-miss cuts a built-in data set (--dataset); tables (--data)"),
        (["--p-miss-test", "0.5"], "--p-miss-test cuts"),
        (["--missing", "mcar:0.3", "--labels", "50"], "--missing, --labels cut"),
        (["--keep-labels"], "--keep-labels cuts"),
        (["--clients", "5"], "--clients 5: K is the number of --data (2)"),
    ],
)
def test_given_tables_when_a_data_set_option_is_given_then_refused_not_ignored(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    # they were silently not applied (the same loss to the last digit) while the summary line
    # said "train p_miss 0.3" or "train missing mcar:0.3, 50 labels"; K stayed the tables'
    # number whatever --clients said
    from typer.testing import CliRunner

    from vfl_cli.app import app

    p0 = write_labels(tmp_path / "p0.csv", ["yes" if i % 3 else "no" for i in range(60)])
    p1 = tmp_path / "p1.csv"
    p1.write_text("id,b\n" + "".join(f"{i},{i % 5}\n" for i in range(60)), encoding="utf-8")
    args = ["simulate", "--data", str(p0), "--data", str(p1), "--id-column", "id"]
    args += ["--label-column", "y", "--epochs", "1", "--no-progress"]
    args += ["--out", str(tmp_path / "r.json")]
    refused = CliRunner().invoke(app, [*args, *extra])
    assert refused.exit_code == 2, refused.output
    assert named in refused.output and len(refused.output.strip().splitlines()) == 1
    assert "Traceback" not in refused.output
    ran = CliRunner().invoke(app, args)
    assert ran.exit_code == 0, ran.output
    summary = ran.stdout.splitlines()[0]
    assert summary.startswith("trained 1 epochs on tables with K=2, seed 0;"), summary


def test_given_party_directories_when_labels_are_cut_then_refused(tmp_path: Path) -> None:
    from vfl_core.errors import ConfigError
    from vfl_core.simulate import SimulationConfig

    with pytest.raises(ConfigError, match=r"^--labels cuts a built-in data set .* party dir"):
        SimulationConfig(party_dirs=(tmp_path / "p0", tmp_path / "p1"), labels=5)
    SimulationConfig(dataset="digits", labels=5, p_miss_train=0.3, p_miss_test=(0.5,))
