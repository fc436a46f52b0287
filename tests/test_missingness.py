"""Missingness mechanisms (MCAR, MNAR, MAR 1, MAR 2) against their definitions, and few labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.datasets import Dataset
from vfl_core.data.missingness import (
    UNLABELLED,
    Mechanism,
    block_means,
    draw_observed,
    parse_mechanism,
)
from vfl_core.data.party_dir import labelled_rows_only, load_party_dir
from vfl_core.data.prepare import draw_missingness, prepare_parties
from vfl_core.errors import ConfigError, DataError

N, K = 40_000, 4


def tolerance(p: float, n: int) -> float:
    """Five binomial standard deviations of a frequency estimated from n draws."""
    return 5.0 * np.sqrt(max(p * (1.0 - p), 1e-12) / n)


def gaussian_blocks(n: int = N, k: int = K, seed: int = 0) -> list[np.ndarray]:
    """Blocks of 3 features whose means are negative for about half of the samples."""
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, 1.0, size=(n, 3)).astype(np.float32) for _ in range(k)]


def draw(spec: str, blocks: list[np.ndarray], seed: int = 7) -> np.ndarray:
    return draw_observed(parse_mechanism(spec), blocks, np.zeros(len(blocks)), _rng(seed))


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def hide_missing(blocks: list[np.ndarray], observed: np.ndarray) -> list[np.ndarray]:
    """The same data with every value that went missing replaced (flipped and shifted)."""
    out = []
    for k, block in enumerate(blocks):
        changed = block.copy()
        changed[~observed[:, k]] = -changed[~observed[:, k]] + 5.0
        out.append(changed)
    return out


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "kind", "p"),
    [
        ("mcar:0.2", "mcar", 0.2),
        ("MNAR:0.9", "mnar", 0.9),
        ("mar1-anchor", "mar1-anchor", 0.7),
        ("mar2-anchor:0.8", "mar2-anchor", 0.8),
    ],
)
def test_parse_mechanism(text: str, kind: str, p: float) -> None:
    mechanism = parse_mechanism(text)
    assert (mechanism.kind, mechanism.p) == (kind, p)
    assert parse_mechanism(mechanism.spec) == mechanism


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("mice:0.2", "unknown missingness mechanism"),
        ("mnar", "needs a probability"),
        ("mcar:x", "not a probability"),
        ("mnar:1.5", r"\[0, 1\]"),
    ],
)
def test_parse_mechanism_refuses(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_mechanism(text)


# ---------------------------------------------------------------- MCAR


def test_mcar_is_todays_draw() -> None:
    """MCAR through the mechanism gives exactly the mask `vfl prepare` always drew."""
    blocks = gaussian_blocks(1000)
    mechanism = Mechanism("mcar", 0.3, per_party=(0.1, 0.3, 0.5, 0.0))
    ours = draw_observed(mechanism, blocks, np.zeros(K), _rng(3))
    assert np.array_equal(ours, draw_missingness(1000, [0.1, 0.3, 0.5, 0.0], _rng(3)))


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5])
def test_mcar_frequency(p: float) -> None:
    observed = draw(f"mcar:{p}", gaussian_blocks())
    for k in range(K):
        assert abs((~observed[:, k]).mean() - p) <= tolerance(p, N)


# ---------------------------------------------------------------- MNAR


@pytest.mark.parametrize("p", [0.7, 0.9])
def test_mnar_drop_rate_depends_on_the_sign_of_the_blocks_own_mean(p: float) -> None:
    blocks = gaussian_blocks()
    observed = draw(f"mnar:{p}", blocks)
    negative = block_means(blocks) < 0  # (N, K)
    for k in range(K):
        neg, pos = negative[:, k], ~negative[:, k]
        assert abs((~observed[neg, k]).mean() - p) <= tolerance(p, neg.sum())
        assert abs((~observed[pos, k]).mean() - (1 - p)) <= tolerance(1 - p, pos.sum())


def test_mnar_depends_on_the_missing_values() -> None:
    """Changing only values that went missing changes the mask: not MAR."""
    blocks = gaussian_blocks(2000)
    observed = draw("mnar:0.9", blocks)
    assert not np.array_equal(draw("mnar:0.9", hide_missing(blocks, observed)), observed)


def test_mnar_uses_the_training_centres() -> None:
    """ "Negative" is relative to the centre: shifting data and centre together changes nothing."""
    blocks = gaussian_blocks(3000)
    mechanism = parse_mechanism("mnar:0.7")
    plain = draw_observed(mechanism, blocks, np.zeros(K), _rng(1))
    shifted = draw_observed(mechanism, [b + 0.5 for b in blocks], np.full(K, 0.5), _rng(1))
    assert np.array_equal(plain, shifted)


# ---------------------------------------------------------------- MAR


@pytest.mark.parametrize(
    "spec", ["mar1-anchor", "mar2-anchor", "mar1-anchor:0.9", "mar2-anchor:0.9"]
)
def test_mar_depends_only_on_observed_values(spec: str) -> None:
    """The definition of MAR for a realised mask: replacing every value that went missing (and
    so could not be read) gives the same mask from the same random stream."""
    blocks = gaussian_blocks(5000)
    observed = draw(spec, blocks)
    assert observed[:, 0].all()  # the anchor block is always observed
    assert (~observed).any()
    assert np.array_equal(draw(spec, hide_missing(blocks, observed)), observed)


@pytest.mark.parametrize("p", [0.7, 0.9])
def test_mar1_frequencies(p: float) -> None:
    blocks = gaussian_blocks()
    observed = draw(f"mar1-anchor:{p}", blocks)
    anchor_negative = block_means(blocks)[:, 0] < 0
    for k in range(1, K):
        for rows, expected in ((anchor_negative, p), (~anchor_negative, 1 - p)):
            rate = (~observed[rows, k]).mean()
            assert abs(rate - expected) <= tolerance(expected, rows.sum())
        # ... and not on the block's own value: its drop rate is the same for both signs
        own_negative = block_means(blocks)[:, k] < 0
        rates = [(~observed[r, k]).mean() for r in (own_negative, ~own_negative)]
        assert abs(rates[0] - rates[1]) <= 2 * tolerance(0.5, N // 2)


def test_mar2_reads_the_mean_of_the_observed_earlier_blocks() -> None:
    p = 0.8
    blocks = gaussian_blocks()
    observed = draw(f"mar2-anchor:{p}", blocks)
    means = block_means(blocks)
    for k in range(1, K):
        seen = observed[:, :k]
        earlier = (means[:, :k] * seen).sum(axis=1) / seen.sum(axis=1)
        for rows, expected in ((earlier < 0, p), (earlier >= 0, 1 - p)):
            rate = (~observed[rows, k]).mean()
            assert abs(rate - expected) <= tolerance(expected, rows.sum())


def test_mar_needs_two_parties() -> None:
    with pytest.raises(ConfigError, match="at least 2 parties"):
        draw("mar1-anchor", gaussian_blocks(10, k=1))


# ---------------------------------------------------------------- in vfl prepare


def tabular(n: int = 600, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(3.0, 2.0, size=(n, 8)).astype(np.float32)  # standardised by prepare
    return Dataset(
        name="toy",
        kind="tabular",
        x=x,
        y=rng.integers(0, 3, n),
        ids=np.array([f"toy-{i}" for i in range(n)]),
        num_classes=3,
    )


def prepare(out: Path, dataset: Dataset, **kwargs: object) -> list[Path]:
    args: dict = {"test_fraction": 0.25, "seed": 0} | kwargs
    return prepare_parties(dataset, out, K, [0.0] * K, [0.0] * K, **args)


def test_prepare_mnar_keeps_exactly_the_blocks_with_non_negative_mean(tmp_path: Path) -> None:
    """With P = 1 the rule is deterministic: party k holds a sample iff its block's mean
    (standardised with training statistics, in both splits) is not negative; samples held by
    nobody are dropped and counted, as with MCAR."""
    dataset = tabular()
    mechanism = parse_mechanism("mnar:1")
    paths = prepare(tmp_path, dataset, mechanisms={"train": mechanism, "test": mechanism})
    summary = json.loads((tmp_path / "prepare.json").read_text())
    assert summary["missing"] == {"train": "mnar:1", "test": "mnar:1"}
    held: dict[str, set[str]] = {"train": set(), "test": set()}
    for path in paths:
        party = load_party_dir(path)
        for name, split in party.splits.items():
            assert (split.features.mean(axis=1) >= -1e-6).all()
            held[name] |= set(split.ids.tolist())
    for name in ("train", "test"):
        total = summary["counts"][name]["rows"] + summary["counts"][name]["dropped_no_party"]
        assert summary["counts"][name]["rows"] == len(held[name])
        assert summary["counts"][name]["dropped_no_party"] > 0
        assert total == (450 if name == "train" else 150)


def test_prepare_mar1_anchor_block_decides(tmp_path: Path) -> None:
    mechanism = parse_mechanism("mar1-anchor:1")
    paths = prepare(tmp_path, tabular(), mechanisms={"train": mechanism, "test": mechanism})
    parties = [load_party_dir(p) for p in paths]
    anchor = parties[0].splits["train"]
    expected = set(anchor.ids[anchor.features.mean(axis=1) >= 0].tolist())
    for party in parties[1:]:
        assert set(party.splits["train"].ids.tolist()) == expected


def test_prepare_default_is_unchanged_mcar(tmp_path: Path) -> None:
    """No mechanism given: the same directories as the MCAR probabilities always gave."""
    dataset = tabular()
    plain = prepare_parties(dataset, tmp_path / "a", K, [0.3] * K, [0.1] * K, 0.25, 0)
    spelled = prepare_parties(
        dataset,
        tmp_path / "b",
        K,
        [0.0] * K,
        [0.0] * K,
        0.25,
        0,
        mechanisms={"train": parse_mechanism("mcar:0.3"), "test": parse_mechanism("mcar:0.1")},
    )
    for a, b in zip(plain, spelled, strict=True):
        for name in ("train", "test"):
            one, two = (load_party_dir(p).splits[name] for p in (a, b))
            assert np.array_equal(one.ids, two.ids) and np.array_equal(one.features, two.features)


# ---------------------------------------------------------------- few labels


def test_prepare_keeps_n_labels(tmp_path: Path) -> None:
    paths = prepare(tmp_path, tabular(), labels=50, label_blocks=[0, 1])
    parties = [load_party_dir(p) for p in paths]
    labelled = [
        set(p.splits["train"].ids[p.splits["train"].labels != UNLABELLED].tolist())
        for p in parties[:2]
    ]
    # the same 50 samples are labelled at both label parties (no missingness here)
    assert len(labelled[0]) == 50 and labelled[0] == labelled[1]
    assert (parties[0].splits["test"].labels != UNLABELLED).all()
    assert [p.meta.unlabelled_rows for p in parties] == [True, True, False, False]
    summary = json.loads((tmp_path / "prepare.json").read_text())
    assert summary["labels"] == 50 and summary["counts"]["train"]["labelled"] == 50
    # a method that learns from labels trains on the labelled rows only
    only = labelled_rows_only(parties[0])
    assert len(only.splits["train"]) == 50 and len(only.splits["test"]) == 150
    assert labelled_rows_only(parties[2]) is parties[2]  # feature-only: nothing to drop


def test_prepare_labels_is_seeded_and_bounded(tmp_path: Path) -> None:
    a = prepare(tmp_path / "a", tabular(), labels=30)
    b = prepare(tmp_path / "b", tabular(), labels=30)
    assert np.array_equal(
        load_party_dir(a[0]).splits["train"].labels, load_party_dir(b[0]).splits["train"].labels
    )
    with pytest.raises(ConfigError, match="label parties hold only 450"):
        prepare(tmp_path / "c", tabular(), labels=451)


def test_unlabelled_marker_only_in_training_split(tmp_path: Path) -> None:
    paths = prepare(tmp_path, tabular(), labels=10)
    labels_file = paths[0] / "test" / "labels.npy"
    labels = np.load(labels_file)
    labels[0] = UNLABELLED
    np.save(labels_file, labels)
    with pytest.raises(DataError, match=r"test/labels.npy: label -1 outside \[0, 3\)"):
        load_party_dir(paths[0])


def test_cli_prepare_mechanism_and_labels(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "prepare",
            "--dataset",
            "digits",
            "--out",
            str(tmp_path),
            "--missing",
            "mnar:0.7",
            "--missing-test",
            "mar2",
            "--labels",
            "100",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "missing train mnar:0.7, test mar2:0.7" in result.output
    assert "(labelled)" in result.output
    bad = CliRunner().invoke(
        app, ["prepare", "--out", str(tmp_path / "x"), "--missing", "mnar:0.7", "--nonuniform"]
    )
    assert bad.exit_code != 0 and "not both" in bad.output


def test_simulate_with_mechanisms_and_few_labels(tmp_path: Path) -> None:
    """vfl simulate: a mechanism for training, one test table per test mechanism, few labels."""
    out = tmp_path / "sim.json"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--epochs",
            "1",
            "--missing",
            "mar1",
            "--missing-test",
            "mcar:0",
            "--missing-test",
            "mnar:0.9",
            "--labels",
            "200",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "train missing mar1, 200 labels" in result.output
    assert "test missing mcar:0" in result.output and "test missing mnar:0.9" in result.output
    rows = json.loads(out.read_text())["results"]
    assert [r["missing_test"] for r in rows] == ["mcar:0", "mnar:0.9"]
    # the full test split is scored under no missingness; MNAR 9 drops blocks and samples
    overall = [r["rows"][-1] for r in rows]
    assert overall[0]["samples"] == 359 and 0 < overall[1]["samples"] < 359  # 20% of 1797
