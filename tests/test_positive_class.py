"""--positive-class: a binary label's positive class (index 1, what F1, AUC, the Brier score and
the decision threshold are about) chosen by name instead of by sort order, e.g. "fraud" of
fraud/ok, which would otherwise make "ok" the positive class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.label_summary import class_mapping
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import ConfigError


def table(path: Path, labels: list[str]) -> Path:
    rows = "".join(f"{i},{i % 7},{labels[i % len(labels)]}\n" for i in range(60))
    path.write_text("id,a,y\n" + rows, encoding="utf-8")
    return path


def source(path: Path, positive: str | None) -> TableSource:
    return TableSource(
        path=path,
        id_column="id",
        label_column="y",
        block=0,
        num_blocks=2,
        test_fraction=0.2,
        positive_class=positive,
    )


def test_given_positive_class_then_it_is_index_one_in_every_split(tmp_path: Path) -> None:
    path = table(tmp_path / "t.csv", ["fraud", "ok", "ok"])
    plain, _ = load_table_party(source(path, None))
    chosen, fitted = load_table_party(source(path, "fraud"))
    assert (plain.preprocessing or {})["classes"] == ["fraud", "ok"]
    assert fitted.classes == ("ok", "fraud")
    for name, split in chosen.splits.items():
        # the same rows, each label's index flipped: 1 is now "fraud" wherever it was 0
        assert split.labels is not None and plain.splits[name].labels is not None
        assert (split.labels == 1 - plain.splits[name].labels).all(), name


def test_given_positive_class_that_sorts_last_then_nothing_changes(tmp_path: Path) -> None:
    path = table(tmp_path / "t.csv", ["no", "yes"])
    plain, _ = load_table_party(source(path, None))
    chosen, _ = load_table_party(source(path, "yes"))
    assert (chosen.preprocessing or {})["classes"] == ["no", "yes"]
    assert (chosen.splits["train"].labels == plain.splits["train"].labels).all()


@pytest.mark.parametrize(
    ("labels", "positive", "said"),
    [
        (["fraud", "ok"], "Fraud", "has the classes 'fraud' and 'ok'"),
        (["a", "b", "c"], "a", "has 3 classes; it applies to a binary label"),
    ],
)
def test_given_a_positive_class_the_label_cannot_have_then_refused_naming_it(
    tmp_path: Path, labels: list[str], positive: str, said: str
) -> None:
    path = table(tmp_path / "t.csv", labels)
    with pytest.raises(ConfigError) as caught:
        load_table_party(source(path, positive))
    message = str(caught.value)
    assert message.startswith(f"--positive-class {positive!r}: {path}: label column 'y'")
    assert said in message and "\n" not in message


def test_given_fitted_preprocessing_with_another_positive_class_then_refused(
    tmp_path: Path,
) -> None:
    path = table(tmp_path / "t.csv", ["fraud", "ok", "ok"])
    _, fitted = load_table_party(source(path, None))  # positive: "ok", the class sorting last
    same, _ = load_table_party(source(path, "ok"), fitted)
    assert (same.preprocessing or {})["classes"] == ["fraud", "ok"]
    with pytest.raises(ConfigError, match="refit to change it"):
        load_table_party(source(path, "fraud"), fitted)


def test_given_simulate_with_positive_class_then_f1_is_the_named_class(tmp_path: Path) -> None:
    label = table(tmp_path / "p0.csv", ["fraud", "ok", "ok", "ok"])
    other = tmp_path / "p1.csv"
    other.write_text("id,b\n" + "".join(f"{i},{i % 5}\n" for i in range(60)), encoding="utf-8")
    base = ["simulate", "--data", str(label), "--data", str(other), "--id-column", "id"]
    base += ["--label-column", "y", "--epochs", "1", "--threshold", "0.5"]
    f1 = {}
    for positive in (None, "fraud"):
        out = tmp_path / f"{positive}.json"
        extra = [] if positive is None else ["--positive-class", positive]
        result = CliRunner().invoke(app, [*base, *extra, "--out", str(out)])
        assert result.exit_code == 0, result.output
        rows = json.loads(out.read_text())["results"][0]["rows"]
        f1[positive] = next(r for r in rows if r["observed"] == "all")["f1"]
    # one epoch on noise predicts the majority class "ok": its F1 is high, "fraud"'s is 0
    assert f1[None] > 0.5 and f1["fraud"] < f1[None], f1


def test_given_positive_class_on_party_directories_then_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["simulate", "--positive-class", "x", "--epochs", "1"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and lines[-1].startswith("error: --positive-class applies to")


def test_given_simulate_then_it_prints_and_writes_which_class_is_positive(
    tmp_path: Path,
) -> None:
    label = table(tmp_path / "p0.csv", ["fraud", "ok", "ok", "ok"])
    other = tmp_path / "p1.csv"
    other.write_text("id,b\n" + "".join(f"{i},{i % 5}\n" for i in range(60)), encoding="utf-8")
    base = ["simulate", "--data", str(label), "--data", str(other), "--id-column", "id"]
    base += ["--label-column", "y", "--epochs", "1", "--no-progress"]
    train_rows = len(load_table_party(source(label, None))[0].splits["train"])
    for extra, classes, positive in [
        ([], ["fraud", "ok"], "ok"),
        (["--positive-class", "fraud"], ["ok", "fraud"], "fraud"),
    ]:
        out = tmp_path / "sim.json"
        result = CliRunner().invoke(app, [*base, *extra, "--out", str(out)])
        assert result.exit_code == 0, result.output
        (mapping,) = json.loads(out.read_text())["labels"]
        assert mapping["classes"] == classes and mapping["positive_class"] == positive
        assert mapping["block"] == 0 and mapping["column"] == "y"
        assert sum(mapping["train_rows"]) == train_rows
        said = [line for line in result.stdout.splitlines() if " labels from " in line]
        rows = mapping["train_rows"]
        assert said == [
            f"block 0 labels from 'y' (training rows per class): 0 ({classes[0]!r}): {rows[0]}, "
            f"1 ({classes[1]!r}): {rows[1]}; positive class {positive!r} (F1, AUC, Brier and "
            "the threshold are about it)"
        ], result.stdout


def test_given_regression_or_feature_only_party_then_no_class_mapping(tmp_path: Path) -> None:
    path = table(tmp_path / "t.csv", ["1.5", "2.5", "7"])
    regression, _ = load_table_party(source(path, None).model_copy(update={"task": "regression"}))
    features, _ = load_table_party(
        source(path, None).model_copy(update={"label_column": None, "num_classes": 2})
    )
    assert class_mapping(regression) is None and class_mapping(features) is None
