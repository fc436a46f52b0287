"""The direct data plane in a real federation (issue 43 item 2): vfl-coordinator and three
vfl-client processes over mutual TLS with `--data-plane direct`, the embeddings and gradients
travelling between the parties.

The run trains bit-identically to the in-process federation (per-round losses, participants and
updates, final parameters and optimiser state, test metrics), and the coordinator's message
audit holds no training tensor at all: it sent Round calls and read status replies only. The
evaluations still go through it (docs/data-plane.md); with `--encrypt-relay` they are sealed,
and the coordinator reads no tensor of the run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from harness import BIN, SECRET, Cluster, prepare_digits
from test_equivalence import _assert_same_tensors
from test_relay_grpc import IN_THE_CLEAR, _clear_floats

from vfl_cli.certs_cmd import create_federation
from vfl_core.config import TrainConfig
from vfl_core.data.party_dir import load_party_dir
from vfl_core.inference.choice import ValidationChoice
from vfl_core.inference.metrics import EvalReport
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire.audit import read_audit

pytestmark = pytest.mark.slow

K = 3
EPOCHS = 2
RUN_TIMEOUT_S = 240.0
FLOATS = {"float32", "float16", "bfloat16", "int8", "float64"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("direct-certs") / "certs"
    create_federation(root, [f"party{k}" for k in range(K)], [])
    return root


@pytest.fixture(scope="module")
def every_label(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every party holds labels: three heads, each party's gradient the sum of two others'."""
    return prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=K)


@pytest.fixture(scope="module")
def one_label(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Labels at block 0 only: two feature parties, one head."""
    out = tmp_path_factory.mktemp("direct-one-label")
    argv = [str(BIN / "vfl"), "prepare", "--out", str(out), "--dataset", "digits"]
    argv += ["--clients", str(K), "--p-miss", "0.1", "--seed", "0", "--label-blocks", "0"]
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    return [out / f"party{k}" for k in range(K)]


def _float_tensors(message, path: str = "") -> list[str]:
    """Where a message holds a float tensor (any depth)."""
    found = []
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            values = list(value.values())
        elif field.is_repeated:
            values = list(value)
        else:
            values = [value]
        for v in values:
            if not hasattr(v, "ListFields"):
                continue
            if v.DESCRIPTOR.name == "Tensor" and (v.dtype in FLOATS or v.sealed):
                found.append(f"{path}{field.name}")
            found.extend(_float_tensors(v, f"{path}{field.name}."))
    return found


def _train_in_process(
    dirs: list[Path], train: TrainConfig
) -> tuple[dict[int, Party], list[RoundRecord], EvalReport, ValidationChoice]:
    """harness.train_in_process, with the choice the validation made after training."""
    data = [load_party_dir(d) for d in dirs]
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET.encode()) for d in data
    }
    records: list[RoundRecord] = []
    fed = Federation(InProcessTransport(parties), train, progress=False, on_round=records.append)
    fed.align()
    fed.train()
    return parties, records, fed.evaluate("test"), fed.choice


def _after_training(records: list) -> list:
    """The coordinator's calls to the parties after its last training Round call (requests,
    replies and errors, in the order they passed)."""
    calls = [r for r in records if r.side == "client"]
    trained = [
        i
        for i, r in enumerate(calls)
        if r.rpc == "Round" and r.direction == "request" and not r.message().HasField("evaluation")
    ]
    return calls[trained[-1] + 1 :]


def _call_rounds(calls: list) -> int:
    """Sequential call rounds: the requests sent while none was outstanding each start one (a
    fan-out's requests leave before any of them is answered; a call sent after the answer it
    waited for starts the next round). A count of round trips, not a timing."""
    outstanding, rounds = 0, 0
    for r in calls:
        if r.direction == "request":
            rounds += outstanding == 0
            outstanding += 1
        else:
            outstanding = max(outstanding - 1, 0)
    return rounds


PRIVACY = ["--privacy-embedding-clip", "4", "--privacy-embedding-noise", "0.1"]
OVERLAP = ["--overlap-validation"]
FRESH = ["--fresh-own-tower"]
FLOW_FRESH = ["--epoch-flow", "--fresh-own-tower"]
OVERLAP_EPOCHS = 5  # a best epoch kept late, and (patience 1) a verdict one epoch late


@pytest.mark.parametrize(
    ("data", "options"),
    [
        ("every_label", ["--encrypt-relay"]),
        ("one_label", ["--wire-dtype", "int8", *PRIVACY, "--early-stop-patience", "1"]),
        # rounds that overlap the network (vfl_core.training.direct_stale): blocks of two
        # rounds, each party stepping a round four rounds later, drained before the validation
        ("one_label", ["--staleness", "3", "--early-stop-patience", "1"]),
        ("every_label", ["--staleness", "1"]),
        # the epoch end off the critical path (vfl_core.training.late_validation): epoch e's
        # validation in flight while e + 1 trains, the parties holding their state for a late
        # keep; in process the validation is scored at once and only the verdict waits
        ("one_label", [*OVERLAP, "--early-stop-patience", "1"]),
        ("one_label", [*OVERLAP, "--early-stop-patience", "2", "--staleness", "1"]),
        # and the next epoch sent ahead: its first block carries the steps still due to the
        # parties and leaves before the validation and before the last rounds are back
        ("one_label", [*OVERLAP, "--early-stop-patience", "5", "--staleness", "3"]),
        # and the blocks run on across the epoch's end (--epoch-flow): the next epoch's first
        # block before the validation, which carries the last block's steps; the head validates
        # with the heads it held before that block's first fuse
        ("one_label", [*OVERLAP, "--early-stop-patience", "5", "--staleness", "3", "--epoch-flow"]),
        # the label party's own tower exact (--fresh-own-tower): embedded and stepped at its
        # fuse, held with its heads where the next epoch's first fuses precede the validation
        ("one_label", [*OVERLAP, "--early-stop-patience", "5", "--staleness", "3", *FRESH]),
        ("one_label", [*OVERLAP, "--early-stop-patience", "5", "--staleness", "3", *FLOW_FRESH]),
    ],
    ids=[
        "three-heads",
        "one-head-int8-privacy",
        "one-head-stale3",
        "three-heads-stale1",
        "one-head-overlap",
        "one-head-stale1-overlap",
        "one-head-stale3-overlap-ahead",
        "one-head-stale3-flow",
        "one-head-stale3-overlap-ahead-fresh-own",
        "one-head-stale3-flow-fresh-own",
    ],
)
def test_given_the_direct_plane_when_trained_then_bit_identical_and_the_coordinator_sees_no_tensor(
    tmp_path: Path, certs: Path, data: str, options: list[str], request: pytest.FixtureRequest
) -> None:
    """Three label parties (each party steps on the sum of two heads' gradients, added in head
    order) with the evaluations through the encrypted relay, and one label party with two
    feature parties, the int8 wire dtype, the embedding defence (clipped, noised as they leave
    each party) and early stopping, whose validation after each epoch goes over the direct
    plane too (the label party scores it: vfl_core.training.direct_eval)."""
    dirs = request.getfixturevalue(data)
    audit, ckpt = tmp_path / "messages.audit", tmp_path / "checkpoints"
    with Cluster(tmp_path / "cluster", tls_dir=certs) as cluster:
        coord, clients = cluster.federation(
            dirs,
            epochs=OVERLAP_EPOCHS if "--overlap-validation" in options else EPOCHS,
            deadline=60.0,
            extra=["--data-plane", "direct", *options, "--audit-log", str(audit)],
            client_extra=lambda d: ["--checkpoint-dir", str(ckpt)],
        )
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(60) == 0, cluster.describe()
        config = json.loads((coord.out / "config.json").read_text())
        train = TrainConfig.model_validate(config["train"])
        assert train.data_plane == "direct"  # in the run record
        assert train.overlap_validation == ("--overlap-validation" in options)
        assert train.fresh_own_tower == ("--fresh-own-tower" in options)  # in the run record
        assert (train.wire_dtype == "int8") == ("int8" in options)
        assert (train.privacy.embedding_noise > 0) == ("int8" in options)
        grpc_rounds = coord.rounds()
        results = coord.results()
        records = read_audit(audit)

    parties, want_rounds, report, choice = _train_in_process(dirs, train)
    assert len(grpc_rounds) == len(want_rounds) > 0
    for got, want in zip(grpc_rounds, want_rounds, strict=True):
        assert got == json.loads(json.dumps(want.to_json())), f"round {want.round_id} differs"

    for block, party in parties.items():
        saved = load_checkpoint(ckpt / f"party{block}.pt", train.model_dump_json())
        _assert_same_tensors(saved["state"], party.state_dict(), f"party{block}")
        restored = Party(party.party_id, party.data, train, secret=SECRET.encode())
        restored.load_state_dict(saved["state"])
        np.testing.assert_array_equal(restored.parameters_vector(), party.parameters_vector())

    assert results is not None
    want_rows = json.loads(json.dumps(report.to_json(), default=str))["rows"]
    got_rows = results["test"]["rows"]
    assert [(r["observed"], r["samples"]) for r in got_rows] == [
        (r["observed"], r["samples"]) for r in want_rows
    ]
    for g, w in zip(got_rows, want_rows, strict=True):
        assert g["accuracy"] == pytest.approx(w["accuracy"], abs=1e-9), g["observed"]

    # the coordinator's messages: training is Round calls out and status back, no tensor at
    # all; only the evaluations (Embed with train false, Predict, Score) still go through it
    rpcs = {r.rpc for r in records}
    assert "Round" in rpcs and not rpcs & {"Fuse", "Backward", "Train"}, rpcs
    for r in records:
        if r.direction == "error":
            continue
        if r.rpc == "Round":  # but a score's aggregates: Brier sums, two float64 a prediction
            found = _float_tensors(r.message())
            assert [f for f in found if not f.endswith("score.brier")] == [], r
        if r.rpc == "Embed" and r.direction == "request":
            assert not r.message().train  # an evaluation's
    validations = [
        r
        for r in records
        if r.rpc == "Round" and r.direction == "request" and r.message().HasField("evaluation")
    ]
    # one label party: each epoch's validation (and the test evaluation, when the validation
    # chose no subsets) is one Round call per party, no tensor in it
    if train.early_stop_patience:
        assert len(validations) >= EPOCHS * K, len(validations)
        # the choice after training (every candidate subset's score), as in process
        assert results["validation_choice"] == json.loads(json.dumps(choice.to_json()))
        # after training too: every candidate of the choice, the validation with the choice in
        # effect, the test evaluation and the test split with every set of parties went over
        # the direct plane (scored by block 0: its calls push to nobody), in a few fan-outs
        # (vfl_core.training.direct_many): no Embed, Predict or Score through the coordinator
        scored = [r.message().evaluation for r in validations if not r.message().send_to]
        assert sum(e.split == "test" for e in scored) >= 1
        after = _after_training(records)
        assert not {"Embed", "Predict", "Score"} & {r.rpc for r in after}, after
        rounds = _call_rounds(after)
        # the last validation, the restore of the best epoch, the candidates, the pooled heads,
        # the validation with the choice, the test evaluation, its sets of parties (up to two
        # fan-outs), the Shutdown: sent one after the other, they took a round per candidate
        # alone, and three per batch the label party was not called for
        made = choice.to_json()
        candidates = [c for p in made["candidates"] for c in p["scores"]]
        # each at least a round one after the other: the candidates, the pooled heads, the
        # validation with the choice, the test evaluation and its sets of parties
        alone = len(candidates) + len(made["pooled"]) + 2 + len(results.get("subsets", []))
        # (12: the choice's outcome moves the count by a fan-out or two, e.g. a set it predicts
        # from a subset; sent one after the other they would take `alone`, 16 here)
        assert rounds <= 12 and rounds + 3 <= alone, (rounds, alone, [r.rpc for r in after])
    else:
        assert validations == []  # three label parties: the evaluations go through the relay
    if train.overlap_validation:  # epoch e's validation in flight while e + 1 trained
        requests = [r.message() for r in records if r.rpc == "Round" and r.direction == "request"]
        assert any(m.evaluation.hold for m in requests if m.HasField("evaluation"))
        assert any(m.after_validation for m in requests)
        assert any(m.evaluation.keep for m in requests if m.HasField("evaluation"))
        if train.epoch_flow:  # the validation carried the epoch's last block's steps
            assert any(m.steps_before for m in requests if m.HasField("evaluation"))
        if train.staleness:  # the epoch's end ahead of its last rounds (direct_stale): a head
            # held its heads; steps of an epoch in the next one's first calls
            assert any(m.hold_heads for m in requests)
            assert any(
                s.epoch < m.epoch
                for m in requests
                if not m.HasField("evaluation")
                for s in m.steps_before
                if s.HasField("epoch")
            )
    if train.encrypt_relay:  # and the evaluations' tensors sealed: the coordinator reads none
        assert _clear_floats(records) <= IN_THE_CLEAR
    elif not train.early_stop_patience:  # three label parties: evaluated through the relay
        assert ("Embed", "response") in _clear_floats(records)  # (control)
