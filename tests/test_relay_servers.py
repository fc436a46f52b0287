"""The encrypted relay over real gRPC party servers in this process (issue 32 item 2): the
federation trains bit for bit as in process; a tampered or replayed box is refused by the party
it was meant for, naming the party that sealed it, and the round goes on without that party; a
key substituted by the coordinator is refused. The real processes, with TLS and the audit log,
are in tests/test_relay_grpc.py."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest

from benchmarks.privacy.relay import federation
from vfl_cli.certs_cmd import create_federation
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire.v1 import vfl_pb2

SECRET = b"relay-test"
RUN = "relay-run"
Rewrite = Callable[[str, object], object]  # (method, request) -> request sent instead


@pytest.fixture(scope="module")
def party_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("relay-data")
    return prepare_parties(load_dataset("digits"), out, 3, [0.1] * 3, [0.1] * 3, 0.2, seed=0)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("relay-certs") / "certs"
    create_federation(out, [f"party{k}" for k in range(3)], [])
    return out


def _train(dtype: str = "float32", encrypt: bool = True) -> TrainConfig:
    model = ModelConfig(representation="mlp", hidden=(16,), embed_dim=8)
    return TrainConfig(
        seed=0, epochs=1, batch_size=128, model=model, wire_dtype=dtype, encrypt_relay=encrypt
    )


def _parties(dirs: list[Path], train: TrainConfig) -> dict[int, Party]:
    data = [load_party_dir(d) for d in dirs]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}


class _Rewriter(grpc.UnaryUnaryClientInterceptor):
    """A coordinator that changes what it relays: `rewrite` sees every request."""

    def __init__(self, rewrite: Rewrite) -> None:
        self.rewrite = rewrite

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(details, self.rewrite(details.method, request))


def _federation(
    parties: dict[int, Party],
    certs: Path,
    rewrite: Rewrite | None = None,
    records: list[RoundRecord] | None = None,
) -> contextlib.AbstractContextManager[Federation]:
    """The parties behind real servicers with their relay, and a Federation over gRPC
    (benchmarks.privacy.relay.federation) through a coordinator that may rewrite what it relays."""
    return federation(
        parties,
        certs,
        [_Rewriter(rewrite)] if rewrite is not None else (),
        on_round=records.append if records is not None else None,
    )


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_given_an_encrypted_relay_when_trained_over_grpc_then_bit_identical_to_in_process(
    party_dirs: list[Path], certs: Path, dtype: str
) -> None:
    local = _parties(party_dirs, _train(dtype, encrypt=False))
    local_fed = Federation(InProcessTransport(local), _train(dtype, False), progress=False)
    local_fed.align()
    local_fed.train()

    remote = _parties(party_dirs, _train(dtype))
    sealed: list[int] = []  # per relayed request: its sealed tensors (and none in the clear)

    def count(method: str, request):
        if method.endswith(("/Train", "/Predict")):
            tensors = [t for f in getattr(request, "fuse", ()) for t in f.embeddings.values()]
            tensors += [t for b in getattr(request, "backward", ()) for t in b.parts]
            tensors += list(getattr(request, "embeddings", {}).values())
            assert all(t.sealed and not t.data for t in tensors), method
            sealed.append(len(tensors))
        return request

    with _federation(remote, certs, count) as fed:
        fed.align()
        fed.train()
        remote_report = fed.evaluate("test")
    assert sum(sealed) > 100
    for block, party in local.items():
        np.testing.assert_array_equal(
            remote[block].parameters_vector(), party.parameters_vector(), err_msg=str(block)
        )
    assert remote_report.to_json() == local_fed.evaluate("test").to_json()


def _first_fuse(request: vfl_pb2.TrainRequest) -> vfl_pb2.FuseRequest | None:
    return request.fuse[0] if len(request.fuse) else None


@pytest.mark.parametrize("attack", ["tamper", "replay"])
def test_given_a_tampered_or_replayed_box_when_relayed_then_refused_and_the_round_goes_on(
    party_dirs: list[Path], certs: Path, attack: str, caplog: pytest.LogCaptureFixture
) -> None:
    """From round 5 on, the first time block 0's embedding travels to block 1, the coordinator
    flips one bit of it, or hands block 1 the box of an earlier round instead: block 1 refuses
    its call (naming the party that sealed the box) and that round runs without block 1's head;
    the later rounds with it."""
    target, seen = 1, {}

    def rewrite(method: str, request):
        if not method.endswith("/Train") or request.header.party_id != f"party{target}":
            return request
        if not request.fuse or 0 not in request.fuse[0].embeddings or "hit" in seen:
            return request
        round_id = request.fuse[0].round_id
        if round_id < 5:
            seen["earlier"] = bytes(request.fuse[0].embeddings[0].sealed[target])
            return request
        seen["hit"] = round_id
        changed = vfl_pb2.TrainRequest()
        changed.CopyFrom(request)
        box = bytearray(changed.fuse[0].embeddings[0].sealed[target])
        if attack == "tamper":
            box[-1] ^= 1
        else:
            box = bytearray(seen["earlier"])
        changed.fuse[0].embeddings[0].sealed[target] = bytes(box)
        return changed

    records: list[RoundRecord] = []
    parties = _parties(party_dirs, _train())
    with caplog.at_level(logging.WARNING), _federation(parties, certs, rewrite, records) as fed:
        fed.align()
        fed.train()
    assert "hit" in seen, "the attack found a round to change"
    by_round = {r.round_id: r for r in records}
    hit = by_round[seen["hit"]]
    assert target in hit.pattern and 0 in hit.present
    assert target not in hit.losses  # its call refused: the round ran without its head
    assert hit.losses  # ... and with the other heads
    expected = "does not authenticate (tampered" if attack == "tamper" else "replayed in round"
    refusals = [m for m in caplog.messages if expected in m]
    assert refusals, caplog.messages[-5:]
    assert ("party 'party0'" if attack == "tamper" else "of block 0") in refusals[0]
    later = [r for r in records if r.round_id > seen["hit"] + 1 and target in r.pattern]
    assert later and all(target in r.losses for r in later if r.present == r.pattern)


def test_given_a_coordinator_that_swaps_a_relay_key_when_relayed_then_every_call_is_refused(
    party_dirs: list[Path], certs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator puts a key of its own in place of party 2's (under party 2's
    certificate and signature): the parties refuse the calls that carry it, naming it."""

    def rewrite(method: str, request):
        if not request.header.relay_keys:
            return request
        changed = type(request)()
        changed.CopyFrom(request)
        for key in changed.header.relay_keys:
            if key.block == 2:
                key.public_key = bytes(32 * [7])
        return changed

    records: list[RoundRecord] = []
    parties = _parties(party_dirs, _train())
    with caplog.at_level(logging.WARNING), _federation(parties, certs, rewrite, records) as fed:
        fed.align()
        with contextlib.suppress(Exception):  # no party can answer: the run may give up
            fed.train()
    assert any("substituted key" in m and "party2" in m for m in caplog.messages)
    assert all(not r.losses for r in records)  # nothing relayed was ever opened
