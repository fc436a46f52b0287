"""A method from outside vfl_core (tests/plugin_local_heads.py: one step, its schema, its party
side and round program) registers itself and runs, with no change to the proto, the servicers,
the party client or the converters:

- in process, where its step goes through the same schema checks as over gRPC;
- as real vfl-coordinator and vfl-client processes that import it (VFL_METHOD_MODULES), bit for
  bit as in process, with an audit that shows its step on the wire and no label leaving a party;
- a malformed tensor of its step is refused with INVALID_ARGUMENT before its handler runs.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import grpc
import numpy as np
import pytest
from harness import SECRET, Cluster, assert_checkpoints_match, train_in_process
from hypothesis import given
from hypothesis import strategies as st
from test_audit import _sent_by_party, _tensors, find_needles
from test_fuzz import FUZZ, HEADERS, REFUSED, RUN, TIMEOUT, serve_party, tensors

from vfl_core.config import TrainConfig
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.methods.registry import PLUGIN_ENV, REGISTRY, _Registry, register, unregister
from vfl_core.training.alignment import batch_digest
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.audit import AuditRecord, read_audit
from vfl_wire.tensors import decode_array, encode_array
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

TESTS = Path(__file__).resolve().parent
ARGS = ["--method", "local_heads", "--seed", "5", "--lr", "0.01"]
RUN_TIMEOUT_S = 180.0


@pytest.fixture
def plugin() -> Iterator[ModuleType]:
    """The plug-in, registered for one test only (other tests list the built-in methods)."""
    module = importlib.import_module("plugin_local_heads")  # registers itself when first imported
    register(module.SPEC)  # no-op then; again after an earlier test unregistered it
    yield module
    unregister(module.METHOD)


def test_given_the_plugin_imported_then_registered_by_name(plugin: ModuleType) -> None:
    assert REGISTRY[plugin.METHOD] is plugin.SPEC
    assert TrainConfig(method=plugin.METHOD).spec.step("LocalHead") is plugin.LOCAL_HEAD


def test_given_the_plugin_method_in_process_then_its_heads_learn(
    plugin: ModuleType, party_dirs: list[Path]
) -> None:
    train = TrainConfig(method=plugin.METHOD, epochs=2, seed=5, lr=0.01)
    parties, records, report = train_in_process(party_dirs, train)
    labelled = [b for b, p in parties.items() if p.data.meta.has_labels]
    assert records and all(set(r.losses) <= set(labelled) for r in records)
    assert {b for r in records for b in r.losses} == set(labelled)
    first = np.mean([v for r in records[:10] for v in r.losses.values()])
    last = np.mean([v for r in records[-10:] for v in r.losses.values()])
    assert last < first  # the local heads learn
    overall = report.to_json()["rows"][-1]
    assert overall["observed"] == "all" and overall["accuracy"] > 0.5  # ten classes


@pytest.mark.slow
def test_given_the_plugin_method_over_grpc_when_trained_then_bit_identical_to_in_process(
    plugin: ModuleType,
    cluster: Cluster,
    party_dirs: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the real processes import the method as any deployment would: by module name
    monkeypatch.setenv(PLUGIN_ENV, plugin.__name__)
    paths = [str(TESTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    ckpt, audit = tmp_path / "checkpoints", tmp_path / "messages.audit"
    coord, clients = cluster.federation(
        party_dirs,
        epochs=2,
        deadline=60.0,
        extra=[*ARGS, "--audit-log", str(audit)],
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt)],
    )
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(60) == 0, cluster.describe()
    results = coord.results()
    assert results is not None
    train = TrainConfig.model_validate(json.loads((coord.out / "config.json").read_text())["train"])
    assert train.method == plugin.METHOD

    parties, records, report = train_in_process(party_dirs, train)
    assert coord.rounds() == [r.to_json() for r in records]
    assert_checkpoints_match(ckpt, parties, train)
    got, want = results["test"]["rows"], report.to_json()["rows"]
    assert [(r["observed"], r["samples"], r["accuracy"]) for r in got] == [
        (r["observed"], r["samples"], r["accuracy"]) for r in want
    ]

    records_ = read_audit(audit)
    steps = [r for r in records_ if r.method.endswith("/Step") and r.direction == "request"]
    assert steps and {r.rpc for r in steps} == {"LocalHead"}
    sent = [r for r in records_ if _sent_by_party(r) and r.direction != "error"]
    for record in sent:  # a party sends floats only: a loss, probabilities
        for path, tensor in _tensors(record.message()):
            assert tensor.dtype not in ("int64", "int32") or record.rpc == "Score", path
    labels = _step_labels(steps, [load_party_dir(d) for d in party_dirs])
    assert len(labels) > 20
    needles = [v.astype(d).tobytes() for v in labels for d in ("<i8", "<i4")]
    assert not find_needles([r.data for r in sent], needles), "a label vector left a party"


def _step_labels(requests: list[AuditRecord], data: list[PartyData]) -> list[np.ndarray]:
    """The label vector of each batch a LocalHead request named (non-constant, >= 4 rows)."""
    labels_of = {
        (d.meta.block, name): split.labels for d in data for name, split in d.splits.items()
    }
    out = []
    for record in requests:
        request = record.message()
        block = int(request.header.party_id.removeprefix("party"))
        labels = labels_of.get((block, request.split))
        if labels is not None and request.HasField("rows"):
            batch = labels[decode_array(request.rows).astype(np.int64)]
            if len(batch) >= 4 and np.ptp(batch) > 0:
                out.append(batch)
    return out


def test_given_a_malformed_tensor_of_the_plugin_step_then_invalid_argument_before_its_handler(
    plugin: ModuleType, party_dirs: list[Path]
) -> None:
    train = TrainConfig(method=plugin.METHOD, seed=5)
    party = Party("party0", load_party_dir(party_dirs[0]), train, secret=SECRET.encode())
    weights = party.parameters_vector()
    rows = np.arange(8, dtype=np.int64)
    keys = party.alignment_keys("train")
    digest = batch_digest(keys[int(i)] for i in rows)

    def request(round_id: int) -> vfl_pb2.StepRequest:
        req = vfl_pb2.StepRequest(
            header=convert.header(RUN, "party0"),
            method=plugin.METHOD,
            step="LocalHead",
            round_id=round_id,
            split="train",
            rows=encode_array(rows),
            digest=digest,
        )
        req.scalars["train"].flag = True
        return req

    with serve_party(party) as channel:
        stub = vfl_pb2_grpc.PartyStub(channel)
        bad = {
            "unknown tensor": lambda r: r.tensors["features"].CopyFrom(
                encode_array(np.ones((8, 64), np.float32))
            ),
            "wrong kind": lambda r: r.scalars["train"].CopyFrom(vfl_pb2.Scalar(int=1)),
            "unknown step": lambda r: setattr(r, "step", "Nope"),
            "unknown method": lambda r: setattr(r, "method", "nope"),
            "no rows": lambda r: r.ClearField("rows"),
            "negative row": lambda r: r.rows.CopyFrom(encode_array(np.array([-1] * 8))),
            "nan rows": lambda r: r.rows.CopyFrom(encode_array(np.full(8, np.nan, np.float32))),
        }
        for case, spoil in bad.items():
            req = request(1)
            spoil(req)
            with pytest.raises(grpc.RpcError) as err:
                stub.Step(req, timeout=TIMEOUT)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (case, err.value)
        # no method code ran: the handler's first training step would have moved both
        assert party.last_round == -1 and np.array_equal(party.parameters_vector(), weights)
        reply = stub.Step(request(1), timeout=TIMEOUT)
        assert reply.round_id == 1 and np.isfinite(reply.scalars["loss"].real)
        assert party.last_round == 1 and not np.array_equal(party.parameters_vector(), weights)


def test_given_a_method_module_that_cannot_be_imported_then_its_failure_is_named(
    plugin: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PLUGIN_ENV, "no_such_method_module, plugin_local_heads")
    registry = _Registry(())  # a fresh one: the process's registry has loaded its modules
    assert plugin.METHOD not in registry  # already imported here: it registered elsewhere
    assert registry.failed == [
        f"{PLUGIN_ENV}: cannot import method module 'no_such_method_module': "
        "No module named 'no_such_method_module'"
    ]


@dataclass
class Served:
    """The plug-in's party behind the real servicer, and the next round it expects."""

    party: Party
    stub: vfl_pb2_grpc.PartyStub
    digest: bytes
    next_round: int = 1

    def request(self, round_id: int) -> vfl_pb2.StepRequest:
        req = vfl_pb2.StepRequest(
            header=convert.header(RUN, "party0"),
            method="local_heads",
            step="LocalHead",
            round_id=round_id,
            split="train",
            rows=encode_array(np.arange(8, dtype=np.int64)),
            digest=self.digest,
        )
        req.scalars["train"].flag = True
        return req

    def fingerprint(self) -> tuple[int, bytes]:
        return self.party.last_round, self.party.parameters_vector().tobytes()


@pytest.fixture
def served(plugin: ModuleType, party_dirs: list[Path]) -> Iterator[Served]:
    train = TrainConfig(method=plugin.METHOD, seed=5)
    party = Party("party0", load_party_dir(party_dirs[0]), train, secret=SECRET.encode())
    keys = party.alignment_keys("train")
    with serve_party(party) as channel:
        yield Served(party, vfl_pb2_grpc.PartyStub(channel), batch_digest(keys[:8]))


def _spoil(data: st.DataObject, req: vfl_pb2.StepRequest) -> None:
    """One hostile change to a valid LocalHead request."""
    names = st.sampled_from(["features", "labels", "probabilities", "train", "x" * 200])
    kind = data.draw(st.sampled_from(["rows", "tensor", "map", "scalar", "name", "header"]))
    if kind == "rows":
        req.rows.CopyFrom(data.draw(tensors(rows=8, width=1)))
    elif kind == "tensor":
        req.tensors[data.draw(names)].CopyFrom(data.draw(tensors()))
    elif kind == "map":
        req.maps[data.draw(names)].items[data.draw(st.integers(-(2**31), 2**31 - 1))].CopyFrom(
            data.draw(tensors())
        )
    elif kind == "scalar":
        value = data.draw(
            st.sampled_from(
                [vfl_pb2.Scalar(), vfl_pb2.Scalar(int=1), vfl_pb2.Scalar(real=float("nan")),
                 vfl_pb2.Scalar(text="yes")]
            )
        )  # fmt: skip
        req.scalars[data.draw(st.sampled_from(["train", "loss", "epoch"]))].CopyFrom(value)
    elif kind == "name":
        field = data.draw(st.sampled_from(["method", "step", "split"]))
        setattr(req, field, data.draw(st.text(max_size=300).filter(lambda t: t != "train")))
    else:
        req.header.CopyFrom(data.draw(HEADERS))


@FUZZ
@given(data=st.data())
def test_given_hostile_plugin_steps_when_sent_then_refused_and_the_party_unchanged(
    served: Served, data: st.DataObject
) -> None:
    req = served.request(served.next_round)
    _spoil(data, req)
    before = served.fingerprint()
    with pytest.raises(grpc.RpcError) as err:
        served.stub.Step(req, timeout=TIMEOUT)
    assert err.value.code() in REFUSED, err.value.details()
    assert served.fingerprint() == before
    reply = served.stub.Step(served.request(served.next_round), timeout=TIMEOUT)
    assert reply.round_id == served.next_round and served.party.last_round == reply.round_id
    served.next_round += 1
