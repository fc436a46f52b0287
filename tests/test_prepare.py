"""`vfl prepare`: missingness, per-party probabilities, party directories and their record."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from vfl_cli.prepare_cmd import prepare
from vfl_core.data.datasets import Dataset, load_digits_dataset
from vfl_core.data.party_dir import check_federation, load_party_dir
from vfl_core.data.prepare import draw_missingness, party_p_miss, prepare_parties
from vfl_core.errors import ConfigError

K = 4


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_digits_dataset()


def tabular(n: int = 400, seed: int = 0) -> Dataset:
    """Columns with far-from-standard means and scales, plus one constant column."""
    rng = np.random.default_rng(seed)
    x = rng.normal(50.0, 10.0, size=(n, 8)) * np.arange(1, 9)
    x[:, 3] = 7.0
    return Dataset(
        name="toy",
        kind="tabular",
        x=x.astype(np.float32),
        y=rng.integers(0, 2, n),
        ids=np.array([f"toy-{i}" for i in range(n)]),
        num_classes=2,
    )


def run(dataset: Dataset, out: Path, p: float = 0.0, **kwargs: object) -> list[Path]:
    args: dict = {"test_fraction": 0.2, "seed": 0} | kwargs
    return prepare_parties(dataset, out, K, [p] * K, [p] * K, **args)


def all_files(root: Path) -> dict[str, bytes]:
    return {
        str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()
    }


# ---------------------------------------------------------------- missingness


def test_missing_rate_matches_probability() -> None:
    observed = draw_missingness(20_000, [0.3, 0.0, 1.0, 0.6], np.random.default_rng(1))
    assert observed.shape == (20_000, 4) and observed.dtype == bool
    miss = 1.0 - observed.mean(axis=0)
    assert abs(miss[0] - 0.3) < 0.01 and abs(miss[3] - 0.6) < 0.01
    assert miss[1] == 0.0 and miss[2] == 1.0


def test_missing_probability_out_of_range() -> None:
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        draw_missingness(10, [0.1, 1.5], np.random.default_rng(0))


def test_party_p_miss_options() -> None:
    rng = np.random.default_rng(0)
    assert party_p_miss(3, 0.2, None, False, rng) == [0.2, 0.2, 0.2]
    assert party_p_miss(2, 0.9, [0.1, 0.5], False, rng) == [0.1, 0.5]
    drawn = party_p_miss(4, 0.9, None, True, np.random.default_rng(5))
    assert drawn == party_p_miss(4, 0.0, None, True, np.random.default_rng(5))
    assert all(0.0 < p < 1.0 for p in drawn) and len(set(drawn)) == 4


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((2, 0.1, [0.1], False), "1 per-party probabilities given for 2"),
        ((2, 0.1, [0.1, 0.2], True), "not both"),
        ((2, 1.1, None, False), r"\[0, 1\]"),
        ((0, 0.1, None, False), "at least 1"),
    ],
)
def test_party_p_miss_errors(args: tuple, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        party_p_miss(*args, np.random.default_rng(0))


# ---------------------------------------------------------------- party directories


def test_parties_form_a_valid_federation(tmp_path: Path, digits: Dataset) -> None:
    paths = run(digits, tmp_path, p=0.3)
    assert [p.name for p in paths] == ["party0", "party1", "party2", "party3"]
    parties = [load_party_dir(p) for p in paths]
    check_federation(parties)
    assert [p.meta.feature_shape for p in parties] == [(1, 4, 4)] * 4
    record = json.loads((tmp_path / "prepare.json").read_text())
    for name in ("train", "test"):
        sizes = [len(p.splits[name]) for p in parties]
        assert record["counts"][name]["per_party"] == sizes
        assert 0.6 < min(sizes) / (len(digits) * (0.8 if name == "train" else 0.2)) < 0.8
    assert record["dataset"] == "digits" and record["num_blocks"] == K and record["seed"] == 0


def test_features_are_the_right_block_of_the_right_sample(tmp_path: Path, digits: Dataset) -> None:
    parties = [load_party_dir(p) for p in run(digits, tmp_path, p=0.3)]
    split = parties[3].splits["test"]  # bottom-right quadrant
    rows = [int(i.split("-")[1]) for i in split.ids]
    np.testing.assert_array_equal(split.features, digits.x[rows][:, :, 4:, 4:])
    np.testing.assert_array_equal(split.labels, digits.y[rows])


def test_train_and_test_are_disjoint_and_cover_the_data(tmp_path: Path, digits: Dataset) -> None:
    parties = [load_party_dir(p) for p in run(digits, tmp_path)]  # p_miss 0: everyone has all
    train = set(parties[0].splits["train"].ids.tolist())
    test = set(parties[0].splits["test"].ids.tolist())
    assert not train & test and len(train | test) == len(digits)
    assert len(test) == round(0.2 * len(digits))
    for party in parties[1:]:
        assert party.splits["train"].ids.tolist() == parties[0].splits["train"].ids.tolist()


def test_rows_no_party_holds_are_dropped(tmp_path: Path, digits: Dataset) -> None:
    parties = [load_party_dir(p) for p in run(digits, tmp_path, p=0.7)]
    record = json.loads((tmp_path / "prepare.json").read_text())
    for name in ("train", "test"):
        held = set().union(*(p.splits[name].ids.tolist() for p in parties))
        counts = record["counts"][name]
        assert counts["dropped_no_party"] > 0  # 0.7**4 of the rows: about 24 %
        assert len(held) == counts["rows"]
        assert counts["rows"] + counts["dropped_no_party"] == (
            len(digits) - round(0.2 * len(digits)) if name == "train" else round(0.2 * len(digits))
        )


def test_same_seed_same_bytes_other_seed_other_rows(tmp_path: Path, digits: Dataset) -> None:
    run(digits, tmp_path / "a", p=0.3, seed=7)
    run(digits, tmp_path / "b", p=0.3, seed=7)
    run(digits, tmp_path / "c", p=0.3, seed=8)
    assert all_files(tmp_path / "a") == all_files(tmp_path / "b")
    ids_a = np.load(tmp_path / "a" / "party0" / "train" / "ids.npy")
    ids_c = np.load(tmp_path / "c" / "party0" / "train" / "ids.npy")
    assert ids_a.tolist() != ids_c.tolist()


def test_test_missingness_does_not_reshuffle_training_rows(tmp_path: Path, digits: Dataset) -> None:
    prepare_parties(digits, tmp_path / "a", K, [0.3] * K, [0.0] * K, 0.2, seed=1)
    prepare_parties(digits, tmp_path / "b", K, [0.3] * K, [0.5] * K, 0.2, seed=1)
    a, b = (all_files(tmp_path / d) for d in ("a", "b"))
    assert {f: v for f, v in a.items() if "/train/" in f} == {
        f: v for f, v in b.items() if "/train/" in f
    }


def test_tabular_standardised_with_train_statistics_only(tmp_path: Path) -> None:
    data = tabular()
    parties = [load_party_dir(p) for p in run(data, tmp_path)]
    split = {
        name: np.concatenate([p.splits[name].features for p in parties], axis=1)
        for name in ("train", "test")
    }  # p_miss 0: every party holds every row, so blocks side by side give the whole matrix
    assert np.abs(split["train"].mean(axis=0)).max() < 1e-4
    np.testing.assert_allclose(np.delete(split["train"].std(axis=0), 3), 1.0, rtol=1e-4)
    assert np.all(split["train"][:, 3] == 0.0)  # constant column: centred, not divided by 0
    train_rows = [int(i.split("-")[1]) for i in parties[0].splits["train"].ids]
    test_rows = [int(i.split("-")[1]) for i in parties[0].splits["test"].ids]
    raw = data.x.astype(np.float64)
    mean, std = raw[train_rows].mean(0), raw[train_rows].std(0)
    std[3] = 1.0
    np.testing.assert_allclose(split["test"], (raw[test_rows] - mean) / std, atol=1e-4)
    assert np.abs(split["test"].mean(axis=0)).max() > 1e-3  # test mean not forced to 0


def test_images_are_not_standardised_by_default(tmp_path: Path, digits: Dataset) -> None:
    party = load_party_dir(run(digits, tmp_path)[0])
    assert party.splits["train"].features.min() == 0.0
    assert party.splits["train"].features.max() == 1.0
    assert json.loads((tmp_path / "prepare.json").read_text())["standardize"] is False


def test_feature_only_parties_have_no_labels(tmp_path: Path, digits: Dataset) -> None:
    paths = run(digits, tmp_path, p=0.2, label_blocks=[0, 2])
    parties = [load_party_dir(p) for p in paths]
    check_federation(parties)
    assert [p.meta.has_labels for p in parties] == [True, False, True, False]
    assert not (paths[1] / "train" / "labels.npy").exists()
    assert not (paths[3] / "test" / "labels.npy").exists()
    assert parties[1].splits["train"].labels is None


def test_no_test_split_when_fraction_is_zero(tmp_path: Path, digits: Dataset) -> None:
    paths = run(digits, tmp_path, test_fraction=0.0, prefix="client")
    assert paths[0].name == "client0" and not (paths[0] / "test").exists()
    assert len(load_party_dir(paths[0]).splits["train"]) == len(digits)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"label_blocks": [4]}, "label block 4 out of range"),
        ({"label_blocks": []}, "at least one party"),
        ({"test_fraction": 1.0}, "test fraction"),
        ({"p_miss_train": [0.1]}, "1 train missing probabilities for 4"),
        ({"p_miss_test": [0.1, 2.0, 0.0, 0.0]}, r"\[0, 1\]"),
    ],
)
def test_bad_arguments_are_config_errors(
    tmp_path: Path, digits: Dataset, kwargs: dict, needle: str
) -> None:
    defaults = {"p_miss_train": [0.0] * K, "p_miss_test": [0.0] * K, "test_fraction": 0.2}
    with pytest.raises(ConfigError, match=needle):
        prepare_parties(digits, tmp_path, K, seed=0, **(defaults | kwargs))
    assert not (tmp_path / "party0").exists()


# ---------------------------------------------------------------- command


def command_app() -> typer.Typer:
    app = typer.Typer()
    app.command("prepare")(prepare)
    app.command("other")(lambda: None)  # two commands, so "prepare" is a subcommand as in `vfl`
    return app


def test_prepare_command_writes_parties_and_prints_a_summary(tmp_path: Path) -> None:
    args = ["prepare", "--out", str(tmp_path), "--p-miss", "0.2", "--label-blocks", "0"]
    result = CliRunner().invoke(command_app(), [*args, "--p-miss-test", "0.5", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert "party3" in result.output and "held by nobody" in result.output
    record = json.loads((tmp_path / "prepare.json").read_text())
    assert record["p_miss_train"] == [0.2] * 4 and record["p_miss_test"] == [0.5] * 4
    assert record["label_blocks"] == [0] and record["seed"] == 3


def test_prepare_command_lets_user_errors_propagate(tmp_path: Path) -> None:
    args = ["prepare", "--out", str(tmp_path), "--p-miss-per-party", "0.1,0.2"]
    result = CliRunner().invoke(command_app(), args)
    assert isinstance(result.exception, ConfigError)
    assert "2 per-party probabilities given for 4" in str(result.exception)
