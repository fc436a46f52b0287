"""Party directories: save/load round trip, one-line DataErrors, federation consistency."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from vfl_core.data.party_dir import (
    PartyData,
    PartyMeta,
    PartySplit,
    check_federation,
    load_party_dir,
    save_party_dir,
)
from vfl_core.errors import DataError


def make_party(
    block: int = 0,
    num_blocks: int = 2,
    has_labels: bool = True,
    n: int = 5,
    dataset: str = "toy",
    num_classes: int = 3,
    labels: np.ndarray | None = None,
) -> PartyData:
    meta = PartyMeta(
        dataset=dataset,
        block=block,
        num_blocks=num_blocks,
        kind="tabular",
        feature_shape=(3,),
        num_classes=num_classes,
        has_labels=has_labels,
    )
    ids = np.array([f"s-{i}" for i in range(n)])
    features = np.arange(n * 3, dtype=np.float64).reshape(n, 3) / 7 + block
    if has_labels and labels is None:
        labels = np.arange(n) % num_classes
    labels = labels if has_labels else None
    split = PartySplit(ids=ids, features=features, labels=labels)
    test = PartySplit(ids[:2], features[:2], None if labels is None else labels[:2])
    return PartyData(meta=meta, splits={"train": split, "test": test})


@pytest.fixture
def party_dir(tmp_path: Path) -> Path:
    path = tmp_path / "party0"
    save_party_dir(path, make_party())
    return path


def assert_one_line_error(path: Path, needle: str) -> str:
    with pytest.raises(DataError) as info:
        load_party_dir(path)
    message = str(info.value)
    assert "\n" not in message
    assert needle in message, message
    return message


# ---------------------------------------------------------------- round trip


def test_given_saved_party_when_loaded_then_everything_round_trips(party_dir: Path) -> None:
    original = make_party()
    loaded = load_party_dir(party_dir)
    assert loaded.meta == original.meta
    assert set(loaded.splits) == {"train", "test"}
    for name, split in original.splits.items():
        got = loaded.splits[name]
        assert got.features.dtype == np.float32
        np.testing.assert_allclose(got.features, split.features, rtol=1e-6)
        assert got.ids.dtype.kind == "U"
        assert got.ids.tolist() == split.ids.tolist()
        assert got.labels is not None and got.labels.dtype == np.int64
        assert got.labels.tolist() == split.labels.tolist()


def test_saved_ids_load_without_pickle(party_dir: Path) -> None:
    ids = np.load(party_dir / "train" / "ids.npy", allow_pickle=False)
    assert ids.dtype.kind == "U"


def test_feature_only_party_has_no_labels_file(tmp_path: Path) -> None:
    save_party_dir(tmp_path / "p", make_party(has_labels=False))
    assert not (tmp_path / "p" / "train" / "labels.npy").exists()
    assert load_party_dir(tmp_path / "p").splits["train"].labels is None


def test_feature_only_party_ignores_stray_labels_file(tmp_path: Path) -> None:
    save_party_dir(tmp_path / "p", make_party(has_labels=False))
    np.save(tmp_path / "p" / "train" / "labels.npy", np.zeros(5, dtype=np.int64))
    assert load_party_dir(tmp_path / "p").splits["train"].labels is None


def test_integer_features_are_cast_to_float32(party_dir: Path) -> None:
    np.save(party_dir / "train" / "features.npy", np.ones((5, 3), dtype=np.int32))
    assert load_party_dir(party_dir).splits["train"].features.dtype == np.float32


def test_resaving_without_test_split_removes_stale_test_files(party_dir: Path) -> None:
    party = make_party()
    save_party_dir(party_dir, PartyData(party.meta, {"train": party.splits["train"]}))
    assert not (party_dir / "test").exists()
    assert set(load_party_dir(party_dir).splits) == {"train"}


def test_save_refuses_labels_that_disagree_with_meta(tmp_path: Path) -> None:
    party = make_party(has_labels=False)
    split = party.splits["train"]
    bad = PartySplit(split.ids, split.features, np.zeros(len(split), dtype=np.int64))
    with pytest.raises(DataError, match="has_labels"):
        save_party_dir(tmp_path / "p", PartyData(party.meta, {"train": bad}))


# ---------------------------------------------------------------- errors


def write_meta(field: str, value: object) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        meta = json.loads((path / "meta.json").read_text())
        meta[field] = value
        (path / "meta.json").write_text(json.dumps(meta))

    return mutate


def drop_meta(field: str) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        meta = json.loads((path / "meta.json").read_text())
        del meta[field]
        (path / "meta.json").write_text(json.dumps(meta))

    return mutate


def save_array(name: str, array: np.ndarray, split: str = "train") -> Callable[[Path], None]:
    return lambda path: np.save(path / split / name, array, allow_pickle=True)


def write_bytes(relative: str, data: bytes) -> Callable[[Path], None]:
    return lambda path: (path / relative).write_bytes(data)


def truncate(relative: str) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        file = path / relative
        file.write_bytes(file.read_bytes()[:-7])

    return mutate


def remove(relative: str) -> Callable[[Path], None]:
    return lambda path: (path / relative).unlink()


ERROR_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing meta": (remove("meta.json"), "meta.json: missing"),
    "malformed json": (write_bytes("meta.json", b"{not json"), "malformed JSON"),
    "meta not an object": (write_bytes("meta.json", b"[1, 2]"), "invalid metadata"),
    "meta missing field": (drop_meta("kind"), "invalid metadata: kind: Field required"),
    "meta wrong type": (write_meta("dataset", None), "invalid metadata: dataset"),
    "meta bad value": (write_meta("num_classes", 1), "num_classes"),
    "meta extra field": (write_meta("colour", "red"), "colour"),
    "unknown format": (write_meta("format", 99), "unknown format version 99"),
    "block out of range": (write_meta("block", 2), "block 2 out of range"),
    "bad feature_shape": (write_meta("feature_shape", [1, 3]), "feature_shape"),
    "missing features": (remove("train/features.npy"), "features.npy: missing"),
    "garbage npy": (write_bytes("train/features.npy", b"\x00garbage" * 9), "not a .npy file"),
    "empty npy": (write_bytes("train/labels.npy", b""), "not a .npy file"),
    "corrupt npy header": (write_bytes("train/ids.npy", b"\x93NUMPY\x01\x00zz"), "not a readable"),
    "truncated npy": (truncate("train/ids.npy"), "not a readable"),
    "pickled npy": (save_array("features.npy", np.array([{}] * 5)), "not a readable"),
    "string features": (save_array("features.npy", np.full((5, 3), "a")), "not numeric"),
    "feature shape": (save_array("features.npy", np.zeros((5, 4))), "does not match (n, 3)"),
    "nan features": (save_array("features.npy", np.full((5, 3), np.nan)), "NaN or Inf"),
    "inf features": (save_array("features.npy", np.full((5, 3), np.inf)), "NaN or Inf"),
    "missing ids": (remove("test/ids.npy"), "ids.npy: missing"),
    "ids 2-D": (save_array("ids.npy", np.array([["a"]] * 5)), "1-D"),
    "ids not strings": (save_array("ids.npy", np.arange(5)), "unicode"),
    "ids length": (save_array("ids.npy", np.array(["a", "b"])), "2 IDs but features.npy has 5"),
    "duplicate ids": (
        save_array("ids.npy", np.array(["a", "b", "dup", "c", "dup"])),
        "duplicated sample ID 'dup'",
    ),
    "missing labels": (remove("train/labels.npy"), "labels.npy: missing"),
    "float labels": (save_array("labels.npy", np.zeros(5)), "not an integer"),
    "labels length": (save_array("labels.npy", np.zeros(3, dtype=int)), "does not match (5,)"),
    "label too big": (save_array("labels.npy", np.full(5, 3)), "label 3 outside [0, 3)"),
    "negative label": (save_array("labels.npy", np.full(5, -1)), "label -1 outside"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_given_broken_party_dir_when_loaded_then_one_line_data_error(
    party_dir: Path, case: str
) -> None:
    mutate, needle = ERROR_CASES[case]
    mutate(party_dir)
    message = assert_one_line_error(party_dir, needle)
    assert str(party_dir) in message


def test_missing_directory_is_a_data_error(tmp_path: Path) -> None:
    assert_one_line_error(tmp_path / "nope", "does not exist")


def test_directory_without_splits_is_a_data_error(party_dir: Path) -> None:
    for split in ("train", "test"):
        for file in (party_dir / split).iterdir():
            file.unlink()
        (party_dir / split).rmdir()
    assert_one_line_error(party_dir, "no split directory")


# ---------------------------------------------------------------- federation


def test_consistent_federation_passes() -> None:
    check_federation([make_party(0), make_party(1, has_labels=False)])


def test_labels_may_cover_different_rows() -> None:
    a = make_party(0)
    b = make_party(1)
    split = b.splits["train"]
    fewer = PartySplit(split.ids[2:], split.features[2:], split.labels[2:])
    check_federation([a, PartyData(b.meta, {"train": fewer})])


FEDERATION_CASES: dict[str, tuple[list[PartyData], str]] = {
    "dataset": ([make_party(0), make_party(1, dataset="other")], "disagree on dataset"),
    "num_blocks": ([make_party(0), make_party(1, num_blocks=3)], "disagree on num_blocks"),
    "num_classes": ([make_party(0), make_party(1, num_classes=4)], "disagree on num_classes"),
    "same block": ([make_party(1), make_party(1)], "two parties hold block 1"),
    "no labels": (
        [make_party(0, has_labels=False), make_party(1, has_labels=False)],
        "no party holds labels",
    ),
    "labels disagree": (
        [make_party(0), make_party(1, labels=np.array([0, 1, 2, 2, 1]))],
        "for ID 's-3': block 0 says 0, block 1 says 2",
    ),
}


@pytest.mark.parametrize("case", list(FEDERATION_CASES))
def test_inconsistent_federation_is_a_data_error(case: str) -> None:
    parties, needle = FEDERATION_CASES[case]
    with pytest.raises(DataError) as info:
        check_federation(parties)
    assert "\n" not in str(info.value)
    assert needle in str(info.value)


def test_block_out_of_range_in_federation() -> None:
    bad = make_party(0)
    meta = bad.meta.model_copy(update={"block": 5})  # skips validation, as a buggy writer might
    with pytest.raises(DataError, match="block 5 out of range"):
        check_federation([make_party(0), PartyData(meta, bad.splits)])


def test_empty_federation_is_a_data_error() -> None:
    with pytest.raises(DataError, match="no party"):
        check_federation([])
