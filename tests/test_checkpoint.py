"""Checkpoints: atomic writes, safe reads (weights_only), config checks, party state round trip."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.party_dir import PartyData, PartyMeta, PartySplit
from vfl_core.errors import ConfigError, DataError
from vfl_core.persistence import checkpoint
from vfl_core.persistence.checkpoint import (
    load_checkpoint,
    party_checkpoint_path,
    save_checkpoint,
    save_party_checkpoint,
)
from vfl_core.persistence.checkpoint_store import RoundCheckpoints
from vfl_core.protocol import BackwardCall, EmbedCall, FuseCall
from vfl_core.training.alignment import batch_digest
from vfl_core.training.party import Party

CONFIG = TrainConfig(seed=3, epochs=2, model=ModelConfig(embed_dim=8, hidden=(16,)))
CONFIG_JSON = CONFIG.model_dump_json()
SECRET = b"test-secret"


def _party(party_id: str = "party0", seed: int = 3) -> Party:
    gen = np.random.default_rng(0)
    n = 12
    meta = PartyMeta(
        dataset="toy",
        block=0,
        num_blocks=2,
        kind="tabular",
        feature_shape=(5,),
        num_classes=3,
        has_labels=True,
    )
    split = PartySplit(
        ids=np.array([f"toy-{i}" for i in range(n)]),
        features=gen.normal(size=(n, 5)).astype(np.float32),
        labels=gen.integers(0, 3, size=n).astype(np.int64),
    )
    config = CONFIG.model_copy(update={"seed": seed})
    return Party(party_id, PartyData(meta, {"train": split}), config, secret=SECRET)


def _train_one_round(party: Party, round_id: int = 0) -> None:
    """One round of a single-party federation, so optimisers hold real state."""
    rows = np.arange(6, dtype=np.int64) + round_id
    digest = batch_digest(party.id_hashes("train")[int(r)] for r in rows)
    party.embed(EmbedCall(round_id, "train", rows, digest, True))
    party.fuse(FuseCall(round_id, 0, {}))
    party.backward(BackwardCall(round_id, 0, None))


def _state() -> dict:
    return {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": 4, "name": "x"}


def _assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def _leftover_temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------------ round trip


def test_given_saved_checkpoint_when_loaded_with_same_config_then_state_meta_config_roundtrip(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {"round": 7, "tags": ["a", "b"]})

    loaded = load_checkpoint(path, CONFIG_JSON)

    _assert_same_state(loaded["state"], _state())
    assert loaded["meta"] == {"round": 7, "tags": ["a", "b"]}
    assert loaded["config_json"] == CONFIG_JSON
    assert _leftover_temp_files(tmp_path) == []


def test_given_missing_parent_directory_when_saving_then_it_is_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {})
    assert load_checkpoint(path, None)["state"]["step"] == 4


def test_given_trained_party_when_checkpointed_then_loads_weights_only_into_fresh_party(
    tmp_path: Path,
) -> None:
    party = _party()
    for r in range(3):
        _train_one_round(party, r)
    path = save_party_checkpoint(tmp_path, party, {"reason": "test"})

    # the raw file must load under the safe unpickler, optimiser state dicts included
    raw = torch.load(path, map_location="cpu", weights_only=True)
    assert "exp_avg" in next(iter(raw["state"]["f_opt"]["state"].values()))
    # a party saves its config as it resolved it (vfl_core.auto_rounds: the tables' rounds)
    loaded = load_checkpoint(path, party.config.model_dump_json())
    fresh = _party(seed=99)  # other initial weights
    fresh.load_state_dict(loaded["state"])

    assert path == tmp_path / "party0.pt"
    assert loaded["meta"] == {"party_id": "party0", "block": 0, "last_round": 2, "reason": "test"}
    np.testing.assert_array_equal(fresh.parameters_vector(), party.parameters_vector())
    assert fresh.last_round == 2
    assert fresh.f_opt.state_dict()["state"].keys() == party.f_opt.state_dict()["state"].keys()


def test_given_restored_party_when_training_continues_then_it_matches_uninterrupted_party(
    tmp_path: Path,
) -> None:
    reference, interrupted = _party(), _party()
    for r in range(2):
        _train_one_round(reference, r)
        _train_one_round(interrupted, r)
    path = save_party_checkpoint(tmp_path, interrupted)
    restored = _party(seed=99)
    restored.load_state_dict(load_checkpoint(path, interrupted.config.model_dump_json())["state"])

    _train_one_round(reference, 2)
    _train_one_round(restored, 2)

    np.testing.assert_array_equal(restored.parameters_vector(), reference.parameters_vector())


# ------------------------------------------------------------------------ refusals


def test_given_other_config_when_loading_then_config_error_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {})
    other = CONFIG.model_copy(update={"lr": 0.5}).model_dump_json()

    with pytest.raises(ConfigError) as err:
        load_checkpoint(path, other)

    message = str(err.value)
    assert "\n" not in message
    assert "lr" in message and "0.5" in message


def test_given_nested_config_difference_when_loading_then_error_names_the_dotted_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {})
    other = CONFIG.model_copy(update={"model": ModelConfig(embed_dim=9, hidden=(16,))})

    with pytest.raises(ConfigError, match=r"model\.embed_dim"):
        load_checkpoint(path, other.model_dump_json())


def test_given_same_config_with_other_key_order_when_loading_then_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), '{"a": 1, "b": {"c": 2}}', {})
    assert load_checkpoint(path, '{"b": {"c": 2}, "a": 1}')["state"]["step"] == 4


def test_given_no_expected_config_when_loading_then_any_config_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), '{"anything": true}', {})
    assert load_checkpoint(path, None)["config_json"] == '{"anything": true}'


@pytest.mark.parametrize("keep", [0, 1, 10, 0.5, -20, -1])
def test_given_truncated_file_when_loading_then_data_error(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {})
    data = path.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    path.write_bytes(data[:cut])

    with pytest.raises(DataError) as err:
        load_checkpoint(path, CONFIG_JSON)
    assert "\n" not in str(err.value)
    assert str(path) in str(err.value)


def test_given_flipped_bytes_when_loading_then_data_error(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {})
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64  # the zip central directory region
    data[:4] = b"XXXX"
    path.write_bytes(bytes(data))

    with pytest.raises(DataError):
        load_checkpoint(path, None)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize(
    "content",
    [b"", b"garbage" * 100, pickle.dumps({"state": {}})],
    ids=["empty", "garbage", "plain-pickle"],
)
def test_given_non_checkpoint_file_when_loading_then_data_error(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "c.pt"
    path.write_bytes(content)
    with pytest.raises(DataError):
        load_checkpoint(path, None)


def test_given_missing_file_when_loading_then_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nope.pt", None)


def test_given_torch_file_without_checkpoint_keys_when_loading_then_data_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.pt"
    torch.save({"w": torch.zeros(2)}, path)
    with pytest.raises(DataError, match="not a checkpoint"):
        load_checkpoint(path, None)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch exploited",))


def test_given_pickle_that_runs_code_when_loading_then_refused_and_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.pt"
    torch.save({"format": 1, "config_json": "{}", "meta": {}, "state": {"x": _Exploit()}}, path)

    with pytest.raises(DataError):
        load_checkpoint(path, None)
    assert not (tmp_path / "exploited").exists()


def test_given_object_state_when_saving_then_config_error_and_no_file(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    with pytest.raises(ConfigError, match="plain types"):
        save_checkpoint(path, {"opt": object()}, CONFIG_JSON, {})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "party_id", ["", ".", "..", "a/b", "../x", "a\\b", "bank-best", "bank-round-000000040"]
)
def test_given_party_id_that_is_not_a_file_name_when_building_path_then_config_error(
    tmp_path: Path, party_id: str
) -> None:
    with pytest.raises(ConfigError):
        party_checkpoint_path(tmp_path, party_id)
    with pytest.raises(ConfigError):
        RoundCheckpoints(tmp_path, party_id)


@pytest.mark.parametrize("party_id", ["bank", "party0", "best", "bank-best-2", "round-3", "a.b"])
def test_given_plain_party_id_when_building_path_then_accepted(
    tmp_path: Path, party_id: str
) -> None:
    assert party_checkpoint_path(tmp_path, party_id).name == f"{party_id}.pt"
    assert RoundCheckpoints(tmp_path, party_id).best_path().name == f"{party_id}-best.pt"


# ------------------------------------------------------------------------ atomicity


def test_given_crash_between_temp_write_and_rename_when_saving_then_previous_checkpoint_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {"version": 1})

    def crash(src: object, dst: object) -> None:
        assert Path(str(src)).exists()  # the new checkpoint was fully written to the temp file
        raise OSError("power cut before rename")

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    new_state = {"w": torch.ones(3), "step": 5, "name": "y"}
    with pytest.raises(OSError, match="power cut"):
        save_checkpoint(path, new_state, CONFIG_JSON, {"version": 2})
    monkeypatch.undo()

    loaded = load_checkpoint(path, CONFIG_JSON)
    assert loaded["meta"] == {"version": 1}
    _assert_same_state(loaded["state"], _state())
    assert _leftover_temp_files(tmp_path) == []


def test_given_crash_while_writing_temp_file_when_saving_then_previous_checkpoint_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), CONFIG_JSON, {"version": 1})

    def torn_write(obj: object, f) -> None:
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt  # e.g. SIGINT in the middle of torch.save

    monkeypatch.setattr(torch, "save", torn_write)  # save_checkpoint imports torch when called
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, _state(), CONFIG_JSON, {"version": 2})
    monkeypatch.undo()

    assert load_checkpoint(path, CONFIG_JSON)["meta"] == {"version": 1}
    assert _leftover_temp_files(tmp_path) == []


def test_given_save_when_writing_then_file_is_fsynced_before_rename_and_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: object, dst: object) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    monkeypatch.setattr(checkpoint.os, "replace", replace)
    save_checkpoint(tmp_path / "c.pt", _state(), CONFIG_JSON, {})

    assert events == ["fsync-file", "replace", "fsync-dir"]


def test_given_temp_file_when_saving_then_it_lives_in_the_target_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources: list[Path] = []
    real_replace = os.replace

    def replace(src: object, dst: object) -> None:
        sources.append(Path(str(src)))
        real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", replace)
    save_checkpoint(tmp_path / "c.pt", _state(), CONFIG_JSON, {})

    assert [s.parent for s in sources] == [tmp_path]  # same file system: rename is atomic
