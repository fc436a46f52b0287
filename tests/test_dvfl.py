"""Decoupled VFL, transport-free: the registers, the three tiers' steps, the schedule, what
crosses party boundaries (never a gradient), the unlabelled rows, faults of each entity and
determinism, on small digits federations in one process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import resume_after_crash

from vfl_core.config import DvflConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, PartySplit, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError, ProtocolError, StaleRoundError
from vfl_core.methods.dvfl.messages import GuestCall, HostCall, HostOutputCall, OwnerTrainCall
from vfl_core.methods.dvfl.nets import Registers
from vfl_core.model.reconstruction import reconstruction_loss
from vfl_core.simulate import SimulationConfig, run_simulation
from vfl_core.training.alignment import batch_digest
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.faults import FaultConfig, FaultyTransport
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

pytestmark = pytest.mark.usefixtures("one_torch_thread")

K = 4
SECRET = b"dvfl-tests"
SMALL = DvflConfig(
    guest_hidden=(16,),
    guest_dim=6,
    host_hidden=(12,),
    host_dim=5,
    owner_hidden=(8,),
    owner_epochs=3,
    owner_lr=0.1,
)


def config(epochs: int = 2, **dvfl: object) -> TrainConfig:
    return TrainConfig(
        method="dvfl",
        seed=5,
        epochs=epochs,
        batch_size=64,
        lr=5e-3,
        weight_decay=1e-5,
        dvfl=SMALL.model_copy(update=dvfl),
    )


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    """Digits as four quadrants, every sample at every party, labels at every party."""
    root = tmp_path_factory.mktemp("dvfl-digits")
    paths = prepare_parties(load_digits_dataset(), root, K, [0.0] * K, [0.0] * K, 0.2, seed=0)
    return [load_party_dir(p) for p in paths]


@pytest.fixture(scope="module")
def partial(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    """Digits with 30% of each party's blocks missing (train and test), labels at block 0 only."""
    root = tmp_path_factory.mktemp("dvfl-partial")
    paths = prepare_parties(
        load_digits_dataset(), root, K, [0.3] * K, [0.3] * K, 0.2, seed=0, label_blocks=[0]
    )
    return [load_party_dir(p) for p in paths]


def federation(
    data: list[PartyData], train: TrainConfig, faults: FaultConfig | None = None
) -> tuple[Federation, dict[int, Party], list[RoundRecord]]:
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}
    transport = InProcessTransport(parties)
    wrapped = FaultyTransport(transport, faults, train.seed) if faults is not None else transport
    records: list[RoundRecord] = []
    fed = Federation(wrapped, train, progress=False, on_round=records.append)
    fed.align()
    return fed, parties, records


def weights(module: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]).numpy().copy()


def guest_call(party: Party, round_id: int, rows: np.ndarray, write: bool = True) -> GuestCall:
    digest = batch_digest(party.alignment_keys("train")[int(r)] for r in rows)
    return GuestCall(round_id, 0, rows, digest, write)


# ------------------------------------------------------------------------------ registers


def test_given_writes_when_reading_registers_then_written_slots_and_zeros_elsewhere() -> None:
    regs = Registers(samples=5, guests=3, dim=2, device=torch.device("cpu"))
    regs.write(np.array([1, 3]), 2, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    regs.write(np.array([3]), 0, torch.tensor([[5.0, 6.0]]))

    x, mask = regs.inputs(np.array([3, 1, 0]))

    assert x.tolist() == [[5, 6, 0, 0, 3, 4], [0, 0, 0, 0, 1, 2], [0] * 6]
    assert mask.tolist() == [[1, 1, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1], [0] * 6]
    assert regs.filled().tolist() == [1, 3]
    # the masked loss ignores the unwritten slots whatever the reconstruction says there
    recon = x + (1 - mask) * 100.0
    assert float(reconstruction_loss(recon, x, mask)) == 0.0


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (np.array([0, 5]), "outside 0..4"),
        (np.array([-1]), "outside 0..4"),
        (np.array([2, 2]), "repeated"),
        (np.array([0.5]), "integer"),
    ],
)
def test_given_bad_index_when_checked_then_refused_naming_it(
    index: np.ndarray, message: str
) -> None:
    regs = Registers(samples=5, guests=1, dim=1, device=torch.device("cpu"))
    with pytest.raises(ProtocolError, match=message):
        regs.check_index(index, "host write")


def test_given_huge_register_count_when_allocating_then_refused_before_allocation() -> None:
    with pytest.raises(ProtocolError, match="registers for"):
        Registers(samples=10**12, guests=4, dim=80, device=torch.device("cpu"))


# ------------------------------------------------------------------------------ the tiers


def test_given_guest_step_when_repeated_then_cached_and_stale_or_changed_refused(
    digits: list[PartyData],
) -> None:
    party = Party("party1", digits[1], config(), secret=SECRET)
    rows = np.arange(8)
    before = party.parameters_vector()
    first = party.step("dvfl", "GuestStep", guest_call(party, 0, rows))
    after = party.parameters_vector()

    again = party.step("dvfl", "GuestStep", guest_call(party, 0, rows))  # an identical retry

    assert again is first and np.array_equal(party.parameters_vector(), after)
    assert not np.array_equal(before, after) and first.activations is not None
    assert first.activations.shape == (8, SMALL.guest_dim)
    with pytest.raises(ProtocolError, match="other content"):
        party.step("dvfl", "GuestStep", guest_call(party, 0, rows + 1))
    party.step("dvfl", "GuestStep", guest_call(party, 1, rows, write=False))
    with pytest.raises(StaleRoundError):
        party.step("dvfl", "GuestStep", guest_call(party, 0, rows))
    assert party.last_round == 1


def test_given_host_writes_when_step_then_registers_hold_them_and_host_replays(
    digits: list[PartyData],
) -> None:
    party = Party("party2", digits[2], config(), secret=SECRET)
    acts = np.arange(3 * SMALL.guest_dim, dtype=np.float32).reshape(3, -1)
    index = np.array([4, 0, 9])
    call = HostCall(0, 0, samples=20, index=index, writes={1: acts}, steps=2)

    result = party.step("dvfl", "HostStep", call)

    regs = party.dvfl.registers
    assert regs is not None and regs.filled().tolist() == [0, 4, 9]
    x, _ = regs.inputs(index)
    np.testing.assert_array_equal(x[:, SMALL.guest_dim : 2 * SMALL.guest_dim].numpy(), acts)
    assert result.replayed == 2 and np.isfinite(result.loss)
    with pytest.raises(ProtocolError, match="registers hold 20"):
        party.step("dvfl", "HostStep", replace(call, round_id=1, samples=21))
    with pytest.raises(ProtocolError, match="no such block"):
        party.step("dvfl", "HostStep", replace(call, round_id=2, writes={7: acts}))
    with pytest.raises(ProtocolError, match=r"expected float32 \(3, 6\)"):
        party.step("dvfl", "HostStep", replace(call, round_id=3, writes={1: acts[:, :4]}))


def test_given_trained_hosts_when_output_of_fresh_activations_then_missing_guest_is_zeros(
    digits: list[PartyData],
) -> None:
    party = Party("party0", digits[0], config(), secret=SECRET)
    a = np.random.default_rng(0).normal(size=(4, SMALL.guest_dim)).astype(np.float32)
    zeros = np.zeros_like(a)

    def out(acts: dict[int, np.ndarray]) -> np.ndarray:
        return party.step(
            "dvfl", "HostOutput", HostOutputCall(0, "test", np.arange(4), False, acts)
        )

    only_1 = out({1: a})
    np.testing.assert_array_equal(only_1, out({0: zeros, 1: a, 2: zeros, 3: zeros}))
    assert only_1.shape == (4, SMALL.host_dim)
    with pytest.raises(ProtocolError, match="nothing was written"):
        party.step("dvfl", "HostOutput", HostOutputCall(0, "train", np.arange(4), True))


def test_given_feature_only_party_when_asked_to_train_an_owner_then_refused(
    partial: list[PartyData],
) -> None:
    party = Party("party2", partial[2], config(), secret=SECRET)
    with pytest.raises(ProtocolError, match="holds no labels"):
        party.step("dvfl", "OwnerTrain", OwnerTrainCall(0, 0))


# ------------------------------------------------------------------------------ a whole run


def test_given_dvfl_when_trained_then_stages_in_order_and_accurate(digits: list[PartyData]) -> None:
    sizes = {"guest_hidden": (32,), "guest_dim": 16, "host_hidden": (32,), "host_dim": 16}
    train = config(epochs=3, **sizes, owner_hidden=(32,), owner_epochs=20, owner_lr=0.3)
    cfg = train.dvfl
    fed, _, records = federation(digits, train)

    summaries = fed.train()
    report = fed.evaluate("test")

    assert len(summaries) == train.epochs + cfg.owner_epochs == fed.total_epochs
    local = [r for r in records if r.epoch < train.epochs]
    assert all(r.present == r.pattern == (0, 1, 2, 3) and r.updated == r.pattern for r in local)
    feeds = [r for r in records if r.epoch >= train.epochs and not r.losses]
    transfer = [r for r in feeds if r.updated]
    assert transfer and all(r.updated == (0,) and r.present == (0, 1, 2, 3) for r in transfer)
    # every host delivered in the first owner epoch: the later transfers call no one
    assert {r.epoch for r in transfer} == {train.epochs}
    assert all(r.present == () for r in feeds if r.epoch > train.epochs)
    owner = [r for r in records if r.epoch >= train.epochs and r.losses]
    assert [list(r.losses) for r in owner] == [[0]] * cfg.owner_epochs
    # the owner learns: its loss falls, and the federation predicts far above chance (10%)
    assert owner[-1].losses[0] < owner[0].losses[0] / 2
    assert report.overall().accuracy > 0.75  # 0.87 when measured
    bytes_ = fed.method_stats()["bytes"]
    n = len(fed.alignments["train"])
    assert bytes_["guests_to_coordinator"] == train.epochs * K * n * cfg.guest_dim * 4
    assert bytes_["coordinator_to_hosts"] == K * bytes_["guests_to_coordinator"]
    assert bytes_["hosts_to_owner"] == K * n * cfg.host_dim * 4


def test_given_same_seed_when_trained_twice_then_bit_identical(digits: list[PartyData]) -> None:
    runs = []
    for _ in range(2):
        fed, parties, records = federation(digits, config(epochs=1))
        fed.train()
        runs.append(
            ([r.to_json() for r in records], {b: p.parameters_vector() for b, p in parties.items()})
        )
    assert runs[0][0] == runs[1][0]
    for block in range(K):
        np.testing.assert_array_equal(runs[0][1][block], runs[1][1][block])


def test_given_period_4_when_trained_then_a_quarter_of_the_bytes(digits: list[PartyData]) -> None:
    sent = {}
    for period in (1, 4):
        fed, _, _ = federation(digits, config(epochs=2, period=period, owner_epochs=1))
        fed.train()
        sent[period] = fed.method_stats()["bytes"]["guests_to_coordinator"]
    # every 4th round writes (batches differ in size only at the end of the data)
    assert 0.2 < sent[4] / sent[1] < 0.3


def test_given_other_party_data_when_trained_then_guest_encoders_identical(
    digits: list[PartyData],
) -> None:
    """No gradient crosses a party boundary: what block 3 holds changes the hosts and the owner
    but not a single weight of the other guests' autoencoders."""
    train = config(epochs=2)
    noisy = digits[3].splits["train"]
    scrambled = PartySplit(
        noisy.ids, np.random.default_rng(1).permutation(noisy.features), noisy.labels
    )
    other = [*digits[:3], replace(digits[3], splits={**digits[3].splits, "train": scrambled})]
    trained = []
    for data in (digits, other):
        fed, parties, _ = federation(data, train)
        fed.train()
        trained.append(parties)
    for block in range(3):
        a, b = trained[0][block].dvfl, trained[1][block].dvfl
        np.testing.assert_array_equal(weights(a.guest), weights(b.guest))
        assert not np.array_equal(weights(a.host), weights(b.host))
    owner = [t[0].dvfl.owner for t in trained]
    assert not np.array_equal(weights(owner[0]), weights(owner[1]))


# ------------------------------------------------------------------------------ unlabelled rows


def test_given_rows_without_labels_when_trained_then_guests_learn_from_them(
    partial: list[PartyData],
) -> None:
    """Samples the label owner does not hold have no label anywhere; DVFL's guests and hosts
    still train on them, and removing them changes the guests' encoders."""
    train = config(epochs=2)
    fed, parties, records = federation(partial, train)
    al = fed.alignments["train"]
    unlabelled = np.flatnonzero(al.rows[0] < 0)
    assert len(unlabelled) > 100  # samples only feature-only parties hold
    fed.train()

    no_label_rounds = [r for r in records if r.epoch < train.epochs and 0 not in r.pattern]
    assert no_label_rounds and all(r.present == r.pattern for r in no_label_rounds)
    regs = parties[2].dvfl.registers
    assert regs is not None
    assert bool(regs.written[torch.as_tensor(unlabelled)].any(dim=1).all())

    # the same federation without those samples: every guest ends with other weights
    kept = set(al.keys[i] for i in np.flatnonzero(al.rows[0] >= 0))
    without = [_only(d, kept, parties[d.meta.block]) for d in partial]
    fed_without, parties_without, _ = federation(without, train)
    fed_without.train()
    for block in (1, 2, 3):
        assert not np.array_equal(
            weights(parties[block].dvfl.guest), weights(parties_without[block].dvfl.guest)
        )


def test_given_a_guest_step_on_unlabelled_rows_then_its_encoder_changes(
    partial: list[PartyData],
) -> None:
    fed, parties, _ = federation(partial, config())
    al = fed.alignments["train"]
    rows = al.rows[1][(al.rows[0] < 0) & (al.rows[1] >= 0)][:16]  # block 1's rows without a label
    before = weights(parties[1].dvfl.guest.encoder)
    parties[1].step("dvfl", "GuestStep", guest_call(parties[1], 0, np.sort(rows)))
    assert not np.array_equal(before, weights(parties[1].dvfl.guest.encoder))


def _only(data: PartyData, keys: set[bytes], party: Party) -> PartyData:
    """`data` with only the train rows whose alignment key is in `keys`."""
    split = data.splits["train"]
    hashes = party.alignment_keys("train")
    rows = np.array([i for i, h in enumerate(hashes) if h in keys], dtype=np.int64)
    labels = None if split.labels is None else split.labels[rows]
    kept = PartySplit(split.ids[rows], split.features[rows], labels)
    return replace(data, splits={**data.splits, "train": kept})


# ------------------------------------------------------------------------------ faults


def test_given_host_failures_when_trained_then_guests_go_on_and_down_hosts_do_not_train(
    digits: list[PartyData],
) -> None:
    train = config(epochs=1, owner_epochs=1)
    faults = FaultConfig(fail_rate=1.0, rejoin_rate=0.0, spare=(0,), entity="host")
    fed, parties, records = federation(digits, train, faults)
    initial = {b: weights(p.dvfl.host) for b, p in parties.items()}

    fed.train()

    local = [r for r in records if r.epoch == 0]
    assert all(r.present == (0, 1, 2, 3) and r.updated == (0,) for r in local)
    assert fed.liveness.counts() == {}  # the guests never missed a step
    assert fed.program_state.hosts.state == {0: "up", 1: "down", 2: "down", 3: "down"}
    for block in (1, 2, 3):
        np.testing.assert_array_equal(weights(parties[block].dvfl.host), initial[block])
        assert parties[block].dvfl.registers is None
    assert not np.array_equal(weights(parties[0].dvfl.host), initial[0])
    assert fed.transport.counts()["failures"] == 3
    assert fed.evaluate("test").overall().samples > 0  # the owner learns on host 0 alone


def test_given_hosts_failing_during_the_transfer_when_owner_epochs_go_on_then_all_deliver(
    digits: list[PartyData],
) -> None:
    """The owner keeps each host's last codes; a host that was down when a batch was
    transferred delivers it in a later owner epoch, so no host stays zeros for good."""
    train = config(epochs=1, owner_epochs=6)
    faults = FaultConfig(fail_rate=0.5, rejoin_rate=0.5, entity="host")
    fed, parties, records = federation(digits, train, faults)
    fed.train()
    feeds = [r for r in records if r.epoch >= train.epochs and not r.losses and r.present]
    first = [r for r in feeds if r.epoch == train.epochs]
    assert any(len(r.present) < K for r in first)  # some hosts were down at the first transfer
    assert any(r.epoch > train.epochs for r in feeds)  # and delivered later
    owner = parties[0].dvfl
    assert owner.owner_fed is not None and bool(owner.owner_fed.all())


def test_given_link_failures_when_trained_then_lost_writes_never_reach_the_registers(
    digits: list[PartyData],
) -> None:
    faults = FaultConfig(fail_rate=1.0, rejoin_rate=0.0, spare=(0,), entity="link")
    fed, parties, _ = federation(digits, config(epochs=1, owner_epochs=1), faults)
    fed.train()
    for block, party in parties.items():
        regs = party.dvfl.registers
        assert regs is not None
        written = regs.written.any(dim=0).tolist()
        assert written == [True, False, False, False], block  # only guest 0's links stay up
    assert fed.transport.counts()["failures"] == 3 * K


def test_given_guest_failures_when_trained_then_hosts_keep_the_last_activation(
    digits: list[PartyData],
) -> None:
    faults = FaultConfig(fail_rate=0.5, rejoin_rate=0.0, spare=(0,))
    fed, _, records = federation(digits, config(epochs=1, owner_epochs=1), faults)
    fed.train()
    failed = {u for _, u, kind in fed.transport.events if kind == "failed"}
    assert failed and 0 not in failed
    # the hosts went on every round; a failed guest stopped stepping and writing
    assert all(r.updated == (0, 1, 2, 3) for r in records if r.epoch == 0)
    for block in failed:
        assert not all(block in r.present for r in records if r.epoch == 0)


@pytest.mark.parametrize("entity", ["host", "link"])
def test_given_host_or_link_faults_with_another_method_then_config_error(entity: str) -> None:
    with pytest.raises(ConfigError, match="needs --method dvfl"):
        SimulationConfig(
            train=TrainConfig(method="laser"),
            faults=FaultConfig(fail_rate=0.3, entity=entity),
        )


def test_given_cosine_schedule_with_dvfl_then_refused() -> None:
    with pytest.raises(ValueError, match="constant learning rates"):
        TrainConfig(method="dvfl", scheduler="cosine")


# ------------------------------------------------------------------------------ state


def test_given_trained_party_when_state_reloaded_then_same_weights_registers_and_owner(
    digits: list[PartyData], tmp_path: Path
) -> None:
    train = config(epochs=1, owner_epochs=1)
    fed, parties, _ = federation(digits, train)
    fed.train()
    source = parties[0]
    path = tmp_path / "party0.pt"
    torch.save(source.state_dict(), path)

    copy = Party("party0", digits[0], train, secret=SECRET)
    copy.load_state_dict(torch.load(path, weights_only=True))

    np.testing.assert_array_equal(copy.parameters_vector(), source.parameters_vector())
    assert copy.last_round == source.last_round == fed.round_id - 1
    a, b = source.dvfl, copy.dvfl
    assert torch.equal(a.registers.values, b.registers.values)
    assert torch.equal(a.owner_inputs, b.owner_inputs)
    # the next owner epoch is the same in both
    call = OwnerTrainCall(fed.round_id, 1)
    assert source.step("dvfl", "OwnerTrain", call) == copy.step("dvfl", "OwnerTrain", call)


@pytest.mark.parametrize("crash_at", [29, 49])  # in the guests' stage; in the owner's
def test_given_crash_after_checkpoint_when_resumed_then_bit_identical_to_no_crash(
    digits: list[PartyData], crash_at: int
) -> None:
    train = config(epochs=2, owner_epochs=3)
    snapshot = resume_after_crash(digits, train, crash_at, SECRET)
    assert (snapshot["epoch"] >= train.epochs) == (crash_at == 49)


def test_given_label_only_rows_when_dvfl_trains_then_the_owner_learns_from_them_too() -> None:
    """The owner needs no features of a sample: it holds the label, the hosts hold codes of the
    other guests' activations, so the owner trains on samples it holds only the labels of."""
    train = config(epochs=1, owner_epochs=1)
    base = {"dataset": "digits", "p_miss_train": 0.3, "label_blocks": (0,), "train": train}
    result = run_simulation(SimulationConfig(**base, keep_labels=True))
    owner = result.parties[0]
    split = owner.data.splits["train"]
    features = len(split.features)
    assert len(split) > features  # label-only rows come after the rows with features
    assert owner.dvfl is not None and owner.dvfl.owner_fed is not None
    assert bool(owner.dvfl.owner_fed[features:].any(dim=1).all())  # every one was fed
    without = run_simulation(SimulationConfig(**base))
    assert not np.array_equal(weights(owner.dvfl.owner), weights(without.parties[0].dvfl.owner))


def test_given_few_labels_when_dvfl_trains_then_every_row_trains_the_guests_and_100_the_owner() -> (
    None
):
    """`--labels 100`: the label party keeps its unlabelled rows under dvfl (a label-only
    method drops them); the guests' and hosts' autoencoders never see a label, so they end
    exactly as with every label, and only the owner's classifier changes."""
    train = config(epochs=1, owner_epochs=1)
    base = {"dataset": "digits", "label_blocks": (0,), "train": train}
    few = run_simulation(SimulationConfig(**base, labels=100))
    full = run_simulation(SimulationConfig(**base))
    owner = few.parties[0]
    assert owner.dvfl is not None
    assert len(owner.data.splits["train"]) == len(full.parties[0].data.splits["train"])
    assert int(owner.dvfl._labelled().sum()) == 100
    for block in range(K):
        a, b = few.parties[block].dvfl, full.parties[block].dvfl
        assert a is not None and b is not None
        np.testing.assert_array_equal(weights(a.guest), weights(b.guest))
        np.testing.assert_array_equal(weights(a.host), weights(b.host))
    assert not np.array_equal(weights(owner.dvfl.owner), weights(full.parties[0].dvfl.owner))
    svfl = Party("p0", owner.data, TrainConfig(method="svfl"), secret=SECRET)
    assert len(svfl.data.splits["train"]) == 100  # a method that learns only from labels
