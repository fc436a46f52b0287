"""A refusal of the federation reaches every party: when a party new to the federation is refused
while the parties gather (here: prepared for another number of blocks), the coordinator stops
gathering and every registered party hears the cause at its next heartbeat and exits with one line
naming it and the party that differs, instead of waiting out its --register-timeout (120 s here).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import Cluster, prepare_digits

from vfl_coordinator.registry import Registry
from vfl_core.errors import ConfigError
from vfl_core.protocol import PartyInfo

CAUSE = "party party3 was prepared for 5 blocks, the coordinator expects 4"
TOLD_WITHIN_S = 10.0


def test_given_a_refused_new_party_when_parties_gather_then_wait_and_heartbeats_name_the_cause():
    registry = Registry(3)
    registry.register(PartyInfo("bank", 0, 3, "tabular", (3,), 2, True), "127.0.0.1:1")
    with pytest.raises(ConfigError, match="was prepared for 4 blocks"):
        registry.register(PartyInfo("shop", 1, 4, "tabular", (3,), 2, True), "127.0.0.1:2")
    with pytest.raises(ConfigError, match="the federation cannot start: party shop was prepared"):
        registry.wait(3, None, timeout=60.0)  # at once, not after the timeout
    assert registry.wait_told(0.0) == {0}  # bank has not registered again yet
    with pytest.raises(ConfigError, match="the federation cannot start: party shop"):
        registry.register(PartyInfo("bank", 0, 3, "tabular", (3,), 2, True), "127.0.0.1:1")
    assert registry.wait_told(0.0) == set()


def test_given_a_registered_block_registering_other_data_when_gathering_then_only_it_is_refused():
    registry = Registry(2)
    bank = PartyInfo("bank", 0, 2, "tabular", (3,), 2, True)
    _, lease = registry.register(bank, "127.0.0.1:1")
    with pytest.raises(ConfigError, match="was prepared for 3 blocks"):
        registry.register(PartyInfo("bank", 0, 3, "tabular", (3,), 2, True), "127.0.0.1:1")
    assert registry.refusal is None
    assert registry.register(bank, "127.0.0.1:1", lease=lease) == ("alive", lease)


@pytest.mark.slow
def test_given_a_party_with_another_block_count_when_it_registers_then_every_party_exits_at_once(
    cluster: Cluster, party_dirs: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    wrong = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=5)[3]
    coordinator = cluster.coordinator(clients=4)
    good = [cluster.client(coordinator, d) for d in party_dirs[:3]]
    cluster.wait_for(lambda: all("joined run" in c.log() for c in good), 90, "3 registrations")
    bad = cluster.client(coordinator, wrong)
    assert bad.wait(90) == 2  # refused: it names itself in one line
    refused = time.monotonic()
    assert CAUSE in bad.log()
    for proc in [*good, coordinator]:
        code = proc.wait(max(0.0, refused + TOLD_WITHIN_S - time.monotonic()))
        assert code == 2, proc.tail()
    assert time.monotonic() - refused < TOLD_WITHIN_S
    for client in good:
        last = client.log().strip().splitlines()[-1]
        assert last.startswith("error: coordinator refused registration: the federation cannot")
        assert CAUSE in last
    assert f"error: the federation cannot start: {CAUSE}" in coordinator.log()
