"""--fresh-own-tower (TrainConfig.fresh_own_tower): under bounded staleness the label party
embeds its own rows at each round's Fuse with its current tower and steps it there, so its own
tower trains as with exact rounds; only the feature parties' embeddings are stale.

Shown where it can be shown exactly: when the feature parties' towers never move (the
`withhold` defence: they receive no gradient and take no step), their embeddings are the same
whenever they are computed, so a stale run with the option must leave the label party with the
exact run's tower, heads and optimisers bit for bit, and a stale run without it must not. The
option is a no-op with exact rounds, and refused where another head reads the label party's
embedding. (The gRPC direct plane against in process: tests/test_direct_grpc.py.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vfl_core.auto_rounds import AUTO_STALENESS
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_diabetes_dataset, load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.methods.laser import fresh_own
from vfl_core.persistence.checkpoint import check_config, load_checkpoint
from vfl_core.privacy.config import PrivacyConfig
from vfl_core.protocol import EmbedCall, TrainCall, TrainResult
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire.convert_party import embed_call_from_proto, embed_call_to_proto

K = 3
SECRET = b"fresh-own-test"
FROZEN = PrivacyConfig(gradient_defence="withhold")  # the feature parties' towers never move


def config(**kwargs: object) -> TrainConfig:
    base: dict[str, object] = {
        "seed": 0,
        "epochs": 2,
        "batch_size": 64,
        "lr": 1e-2,
        "early_stop_patience": 0,
        "overlap_validation": False,
        "model": ModelConfig(representation="mlp", embed_dim=8, hidden=(16,)),
    }
    return TrainConfig.model_validate({**base, **kwargs})


def _digits(root: Path, labels: list[int] | None) -> list[PartyData]:
    paths = prepare_parties(
        load_digits_dataset(), root, K, [0.1] * K, [0.1] * K, 0.2, seed=0, label_blocks=labels
    )
    return [load_party_dir(p) for p in paths]


@pytest.fixture(scope="module")
def one_label(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    """digits in three blocks with missing blocks, labels at block 0 only."""
    return _digits(tmp_path_factory.mktemp("fresh-one"), [0])


class _Watched(InProcessTransport):
    """The in-process transport, keeping every training embedding each block answered."""

    def __init__(self, parties: dict[int, Party]) -> None:
        super().__init__(parties)
        self.sent: dict[int, list[np.ndarray]] = {b: [] for b in parties}

    def train(self, calls: dict[int, TrainCall]) -> Callable[[], dict[int, TrainResult]]:
        collect = super().train(calls)

        def collected() -> dict[int, TrainResult]:
            answers = collect()
            for block, answer in answers.items():
                self.sent[block].extend(answer.embeddings.values())
            return answers

        return collected


def _train(datas: list[PartyData], cfg: TrainConfig) -> tuple[dict[int, Party], _Watched]:
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    transport = _Watched(parties)
    fed = Federation(transport, cfg, progress=False)
    fed.align()
    fed.train()
    return parties, transport


def _same_state(a: Party, b: Party) -> bool:
    """Every weight and optimiser state of the two parties equal bit for bit."""
    if not np.array_equal(a.parameters_vector(), b.parameters_vector()):
        return False
    sa, sb = a.models.state_dict(), b.models.state_dict()
    for part in ("rep_opts", "head_opts"):
        for name, opt in sa[part].items():
            for key, state in opt["state"].items():
                other = sb[part][name]["state"][key]
                if any(not np.array_equal(state[k], other[k]) for k in state):
                    return False
    return True


def test_given_frozen_feature_towers_when_stale_with_fresh_own_tower_then_label_party_as_exact(
    one_label: list[PartyData],
) -> None:
    exact, _ = _train(one_label, config(staleness=0, privacy=FROZEN))
    fresh, watched = _train(one_label, config(staleness=3, fresh_own_tower=True, privacy=FROZEN))
    stale, _ = _train(one_label, config(staleness=3, privacy=FROZEN))

    for block in range(1, K):  # (the premise: the feature parties' towers as drawn in each run)
        assert np.array_equal(exact[block].parameters_vector(), stale[block].parameters_vector())
    assert _same_state(fresh[0], exact[0])  # tower, heads and optimisers, bit for bit
    assert not _same_state(stale[0], exact[0])  # (control: staleness alone changes them)
    # the label party's Embed answers carried zeros of the embedding's shape (no party reads
    # them); the feature parties' their embeddings
    assert watched.sent[0] and all(e.shape[1] == 8 and not e.any() for e in watched.sent[0])
    assert all(e.any() for e in watched.sent[1])


def test_given_exact_rounds_when_fresh_own_tower_then_nothing_changes(
    one_label: list[PartyData],
) -> None:
    exact, _ = _train(one_label, config(staleness=0))
    fresh, _ = _train(one_label, config(staleness=0, fresh_own_tower=True))
    for block in range(K):
        assert _same_state(fresh[block], exact[block]), block


def test_given_several_label_parties_when_stale_with_fresh_own_tower_then_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    datas = _digits(tmp_path_factory.mktemp("fresh-every"), None)  # every party holds labels
    cfg = config(staleness=3, fresh_own_tower=True)
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    with pytest.raises(ConfigError, match="--fresh-own-tower needs one label party, not 3"):
        Federation(InProcessTransport(parties), cfg, progress=False)


# ---------------------------------------------------------------- unset: the federation resolves it
@pytest.fixture(scope="module")
def diabetes_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """A table in three blocks' party directories: labels at block 0 only, and at 0 and 1."""
    return {
        name: prepare_parties(
            load_diabetes_dataset(),
            tmp_path_factory.mktemp(f"fresh-table-{name}"),
            K,
            [0.1] * K,
            [0.1] * K,
            0.2,
            seed=0,
            label_blocks=labels,
        )
        for name, labels in (("one", [0]), ("two", [0, 1]))
    }


@pytest.fixture(scope="module")
def diabetes_roots(diabetes_dirs: dict[str, list[Path]]) -> dict[str, list[PartyData]]:
    return {name: [load_party_dir(p) for p in paths] for name, paths in diabetes_dirs.items()}


def _tables(**kwargs: object) -> TrainConfig:
    """The tables' recipe: staleness, overlap validation and epoch flow left unset."""
    return config(epochs=2, overlap_validation=None, early_stop_patience=2, **kwargs)


def _run(datas: list[PartyData], cfg: TrainConfig) -> tuple[Federation, dict[int, Party]]:
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    fed = Federation(_Watched(parties), cfg, progress=False)
    fed.align()
    fed.train()
    return fed, parties


def test_given_tables_and_one_label_party_when_unset_then_on_as_if_given(
    diabetes_roots: dict[str, list[PartyData]],
) -> None:
    unset, parties = _run(diabetes_roots["one"], _tables())
    _, given_parties = _run(diabetes_roots["one"], _tables(fresh_own_tower=True))
    assert unset.config.fresh_own_tower is True and unset.config.staleness == AUTO_STALENESS
    assert unset.fresh_own_block == 0
    assert parties[0].told.fresh_own_tower is None  # told unset: the calls say it
    assert parties[0].laser.fresh_own and not parties[1].laser.fresh_own
    for block in range(K):
        assert _same_state(parties[block], given_parties[block]), block
    sent = unset.transport.sent  # type: ignore[attr-defined]
    assert sent[0] and all(not e.any() for e in sent[0])  # zeros: its tower runs at Fuse


def test_given_tables_and_two_label_parties_when_unset_then_off_with_a_log_line(
    diabetes_roots: dict[str, list[PartyData]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="vfl_core.auto_rounds"):
        fed, parties = _run(diabetes_roots["two"], _tables())
    assert fed.config.fresh_own_tower is False and fed.config.staleness == AUTO_STALENESS
    assert fed.fresh_own_block is None
    assert not any(p.laser.fresh_own for p in parties.values())
    lines = [r.getMessage() for r in caplog.records if "fresh_own_tower" in r.getMessage()]
    assert lines == ["fresh_own_tower unset: off, as 2 label parties read each other's embeddings"]
    sent = fed.transport.sent  # type: ignore[attr-defined]
    assert sent[1] and all(e.any() for e in sent[1])  # each label party's embedding, as computed


def test_given_tables_and_two_label_parties_when_given_then_refused(
    diabetes_roots: dict[str, list[PartyData]],
) -> None:
    cfg = _tables(fresh_own_tower=True)
    datas = diabetes_roots["two"]
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    with pytest.raises(ConfigError, match="--fresh-own-tower needs one label party, not 2"):
        Federation(InProcessTransport(parties), cfg, progress=False)


def test_given_fresh_own_when_asked_of_a_feature_party_then_refused(
    diabetes_roots: dict[str, list[PartyData]],
) -> None:
    data = diabetes_roots["one"][1]
    party = Party("party1", data, config(staleness=3), secret=SECRET)
    rows = np.arange(4)
    call = EmbedCall(0, "train", rows, b"", True, fresh_own=True)
    with pytest.raises(ProtocolError, match="fresh_own asked of party party1, which holds no"):
        party.laser.embed(call)


def test_given_fresh_own_when_it_crosses_the_wire_then_kept() -> None:
    call = EmbedCall(3, "train", np.arange(4), b"d" * 32, True, (0, 1), fresh_own=True)
    back = embed_call_from_proto(embed_call_to_proto(call, None))
    assert back.fresh_own is True and back.blocks == (0, 1)
    plain = embed_call_from_proto(embed_call_to_proto(replace(call, fresh_own=False), None))
    assert plain.fresh_own is False


@pytest.mark.slow
def test_given_two_label_parties_over_grpc_when_unset_then_off_logged_and_recorded(
    diabetes_dirs: dict[str, list[Path]], tmp_path: Path
) -> None:
    """Real processes: each party resolves its copy of the config alone; the coordinator, which
    knows the label parties once they registered, resolves the own tower off, says why, trains
    (no label party answers zeros: none is told fresh_own) and records it."""
    from harness import Cluster

    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = cluster.federation(diabetes_dirs["two"], epochs=2)
        assert coord.wait(240) == 0, cluster.describe()
        for client in clients:
            assert client.wait(60) == 0, cluster.describe()
        log = coord.log_path.read_text()
        results = coord.results()
    assert results is not None and results["status"] == "ok", results
    train = results["config"]["train"]
    assert (train["staleness"], train["epoch_flow"]) == (AUTO_STALENESS, True), train
    assert train["fresh_own_tower"] is False, train
    assert "fresh_own_tower unset: off, as 2 label parties read each other's embeddings" in log


# ---------------------------------------------------------------- what each party records
def test_given_tables_when_unset_then_every_party_records_the_federations_value(
    diabetes_roots: dict[str, list[PartyData]],
) -> None:
    """A party resolves an unset option as for one label party; the federation's training Embed
    calls say what it resolved (EmbedCall.own_tower), which every party records, so that its
    checkpoints' config is the run record's: on with one label party, off with two."""
    for name, want in (("one", True), ("two", False)):
        fed, parties = _run(diabetes_roots[name], _tables())
        assert fed.config.fresh_own_tower is want, name
        for block, party in parties.items():
            assert party.told.fresh_own_tower is None, (name, block)
            assert party.config.model_dump() == fed.config.model_dump(), (name, block)


def test_given_fresh_own_when_the_label_party_answers_then_it_sends_no_rows(
    one_label: list[PartyData],
) -> None:
    """Its Embed answer carries no rows (no head reads them): (0, width), not zeros of the
    batch, so nothing of it crosses the relay."""
    _, watched = _train(one_label, config(staleness=3, fresh_own_tower=True, privacy=FROZEN))
    assert watched.sent[0] and all(e.shape == (0, 8) for e in watched.sent[0])
    assert all(e.shape[0] > 0 for e in watched.sent[1])


def test_given_own_tower_when_it_crosses_the_wire_then_kept_on_training_calls_only() -> None:
    call = EmbedCall(3, "train", np.arange(4), b"d" * 32, True, (0, 1), own_tower=True)
    for said in (True, False):
        back = embed_call_from_proto(embed_call_to_proto(replace(call, own_tower=said), None))
        assert back.own_tower is said
    evaluation = replace(call, train=False, own_tower=None)
    assert embed_call_from_proto(embed_call_to_proto(evaluation, None)).own_tower is None


def test_given_a_checkpoint_recording_it_when_a_new_party_compares_then_only_that_field_loose(
    tmp_path: Path,
) -> None:
    """A restarted party's copy of the config says what the recipe gives one label party; its
    checkpoints what the calls said. The comparison leaves that field out where the party was
    told it unset (fresh_own.learned), and no other."""
    told = _tables()
    saved = told.model_copy(update={"fresh_own_tower": False}).model_dump_json()
    new = told.model_copy(update={"fresh_own_tower": True}).model_dump_json()
    path = tmp_path / "party0-round-000000001.pt"
    check_config(path, saved, new, fresh_own.learned(told))
    with pytest.raises(ConfigError, match="another configuration"):
        check_config(path, saved, new, fresh_own.learned(_tables(fresh_own_tower=True)))
    other = told.model_copy(update={"fresh_own_tower": True, "seed": 1}).model_dump_json()
    with pytest.raises(ConfigError, match="another configuration"):
        check_config(path, saved, other, fresh_own.learned(told))


@pytest.mark.slow
def test_given_two_label_parties_over_grpc_when_unset_then_every_checkpoint_records_it_off(
    diabetes_dirs: dict[str, list[Path]], tmp_path: Path
) -> None:
    """Real processes: each party's end checkpoint holds the config the coordinator recorded
    (the own tower off), not its own resolution as for one label party."""
    from harness import Cluster

    ckpt = tmp_path / "checkpoints"
    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = cluster.federation(
            diabetes_dirs["two"], epochs=2, client_extra=lambda d: ["--checkpoint-dir", str(ckpt)]
        )
        assert coord.wait(240) == 0, cluster.describe()
        for client in clients:
            assert client.wait(60) == 0, cluster.describe()
        results = coord.results()
    assert results is not None and results["status"] == "ok", results
    train = TrainConfig.model_validate(results["config"]["train"])
    assert train.fresh_own_tower is False
    for block in range(K):
        saved = load_checkpoint(ckpt / f"party{block}.pt", train.model_dump_json())
        assert saved["meta"]["block"] == block
