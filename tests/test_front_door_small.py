"""Issue 29's smaller items, as unit checks: where a client listens by default, the TLS
mismatch line, the predictions CSV's party columns, and the registration log of a fresh run."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest

from vfl_cli.remote_cmd import _write_csv
from vfl_client.runner import _tls_reason, advertised_address, listen_address
from vfl_coordinator.registry import Registry
from vfl_coordinator.servicer import _peer_address
from vfl_core.protocol import PartyInfo


@pytest.mark.parametrize(
    ("coordinator", "expected"),
    [
        ("localhost:50051", "127.0.0.1:0"),
        ("127.0.0.1:50051", "127.0.0.1:0"),
        ("[::1]:50051", "127.0.0.1:0"),
        ("coordinator-host:50051", "0.0.0.0:0"),
        ("10.1.2.3:50051", "0.0.0.0:0"),
    ],
)
def test_given_auto_listen_when_resolved_then_loopback_only_for_a_local_coordinator(
    coordinator: str, expected: str
) -> None:
    assert listen_address("auto", coordinator) == expected
    assert listen_address("0.0.0.0:50061", coordinator) == "0.0.0.0:50061"  # as given


def test_given_core_details_ending_in_ok_when_quoted_then_the_status_is_cut() -> None:
    details = "failed to connect to all addresses; last error: UNKNOWN: Tls handshake failed: OK"
    assert _tls_reason(details).endswith("Tls handshake failed")


def test_given_heads_seen_out_of_order_when_written_then_party_columns_in_block_order(
    tmp_path: Path,
) -> None:
    rows = [
        {"id": "a", "observed_blocks": "0+2", "predicted_class": 1, "party0": 1, "party2": 1},
        {"id": "b", "observed_blocks": "1+3", "predicted_class": 0, "party3": 0, "party1": 0},
    ]
    _write_csv(tmp_path / "p.csv", rows)
    with (tmp_path / "p.csv").open() as f:
        header = next(csv.reader(f))
    assert header == [
        "id",
        "observed_blocks",
        "predicted_class",
        "party0",
        "party1",
        "party2",
        "party3",
    ]


def _info(block: int) -> PartyInfo:
    return PartyInfo(
        party_id=f"party{block}",
        block=block,
        num_blocks=2,
        dataset="d",
        feature_shape=(3,),
        num_classes=2,
        has_labels=True,
    )


@pytest.mark.parametrize(
    ("resuming", "said"), [(False, "joining the run"), (True, "resynchronising")]
)
def test_given_first_registration_when_logged_then_resynchronising_only_on_a_resume(
    caplog: pytest.LogCaptureFixture, resuming: bool, said: str
) -> None:
    registry = Registry(2, resuming=resuming)
    with caplog.at_level(logging.INFO, logger="vfl_coordinator.registry"):
        registry.register(_info(0), "127.0.0.1:1", synced=False)
    assert f"party party0 registered ({said}) for block 0" in caplog.text


@pytest.mark.parametrize(
    ("advertise", "listen", "expected"),
    [
        (None, "127.0.0.1:0", "127.0.0.1:40483"),  # `--coordinator localhost:...` may dial ::1
        (None, "[::1]:0", "[::1]:40483"),
        (None, "0.0.0.0:0", ":40483"),  # the coordinator takes the host it sees
        ("client2:50061", "0.0.0.0:50061", "client2:50061"),  # as given
    ],
)
def test_given_no_advertise_when_listening_on_loopback_then_that_address_is_advertised(
    advertise: str | None, listen: str, expected: str
) -> None:
    assert advertised_address(advertise, listen, 40483) == expected


def test_given_an_ipv6_peer_as_grpc_writes_it_when_called_back_then_one_pair_of_brackets() -> None:
    assert _peer_address("ipv6:%5B::1%5D:56526", ":40483") == "[::1]:40483"
    assert _peer_address("ipv4:127.0.0.1:39888", ":40483") == "127.0.0.1:40483"
