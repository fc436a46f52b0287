"""The encrypted relay in a real federation (issue 32 item 2): vfl-coordinator and three
vfl-client processes over mutual TLS, trained once with `--encrypt-relay` and once without.

The two runs end with the same weights, the same round losses and the same test metrics, bit
for bit. The coordinator's `--audit-log` of the encrypted run holds no embedding or gradient it
can decode: every float tensor it relays is sealed, none of the plaintext run's embedding rows
occurs anywhere in it, and no evaluation prediction is in the clear either: the heads seal their
probabilities for the label parties, which combine and score them (vfl_core.inference.blind).
The message audits of tests/test_audit.py, run over both directions: no raw feature vector and
no batch's label vector in any message, gradients and evaluation messages included.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import Cluster, prepare_digits
from test_audit import _batch_labels, _tensors, find_needles

from vfl_cli.certs_cmd import create_federation
from vfl_core.data.party_dir import load_party_dir
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_wire.audit import AuditRecord, read_audit

RUN_TIMEOUT_S = 240.0
K = 3
FLOATS = {"float32", "float16", "bfloat16", "int8", "float64"}
# probabilities and scores; and a Score answer's aggregates, which the coordinator reads to
# report: a task of more classes' Brier sums are float64, two numbers a prediction (regression's
# error sums the same), never a row's value
IN_THE_CLEAR = {("Predict", "response"), ("Score", "request"), ("Score", "response")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The same federation trained with and without --encrypt-relay (one epoch, TLS). The two
    run side by side: each spends most of its time starting processes and waiting on round
    trips, and a 60 s deadline leaves no round to the machine's speed (same weights either way)."""
    base = tmp_path_factory.getbasetemp()
    dirs = prepare_digits(base, p_miss=0.1, seed=0, clients=K)
    certs = tmp_path_factory.mktemp("relay-grpc-certs") / "certs"
    create_federation(certs, [f"party{k}" for k in range(K)], [])
    out = {}
    with contextlib.ExitStack() as stack:
        started = {}
        for name, extra in (("plain", []), ("encrypted", ["--encrypt-relay"])):
            root = tmp_path_factory.mktemp(f"relay-{name}")
            audit, ckpt = root / "messages.audit", root / "checkpoints"
            cluster = stack.enter_context(Cluster(root / "cluster", tls_dir=certs))
            coord, clients = cluster.federation(
                dirs,
                epochs=1,
                deadline=60.0,
                extra=["--audit-log", str(audit), *extra],
                client_extra=lambda d, c=ckpt: ["--checkpoint-dir", str(c)],
            )
            started[name] = (cluster, coord, clients, audit, ckpt)
        for name, (cluster, coord, clients, audit, ckpt) in started.items():
            assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
            for client in clients:
                assert client.wait(60) == 0, cluster.describe()
            config = (coord.out / "config.json").read_text()
            out[name] = {
                "results": coord.results(),
                "rounds": coord.rounds(),
                "records": read_audit(audit),
                "weights": _weights(ckpt, config),
                "dirs": dirs,
                "config": config,
            }
    return out


def _weights(ckpt: Path, config: str) -> dict[int, dict]:
    train = json.dumps(json.loads(config)["train"])
    return {k: load_checkpoint(ckpt / f"party{k}.pt", train)["state"] for k in range(K)}


def _clear_floats(records: list[AuditRecord]) -> set[tuple[str, str]]:
    """(rpc, direction) of the messages with a float tensor in the clear."""
    out = set()
    for r in records:
        if r.direction == "error":
            continue
        for _, t in _tensors(r.message()):
            if t.dtype in FLOATS and (t.data or not t.sealed):
                out.add((r.rpc, r.direction))
    return out


@pytest.mark.slow
def test_given_an_encrypted_relay_when_trained_then_bit_identical_to_the_plaintext_run(
    runs: dict[str, dict],
) -> None:
    plain, sealed = runs["plain"], runs["encrypted"]
    assert '"encrypt_relay":true' in sealed["config"].replace(" ", "")  # in the run record
    assert [r["losses"] for r in sealed["rounds"]] == [r["losses"] for r in plain["rounds"]]
    assert len(plain["rounds"]) > 10
    assert sealed["results"]["test"] == plain["results"]["test"]
    for block, state in plain["weights"].items():
        for part in ("f", "g"):
            for name, tensor in state[part].items():
                other = sealed["weights"][block][part][name]
                assert torch.equal(tensor, other), f"party{block} {part}.{name}"


@pytest.mark.slow
def test_given_an_encrypted_relay_when_the_audit_log_is_read_then_no_relayed_float_is_readable(
    runs: dict[str, dict],
) -> None:
    records = runs["encrypted"]["records"]
    rpcs = {r.rpc for r in records}
    assert {"Train", "Embed", "Predict", "Score"} <= rpcs
    assert _clear_floats(records) <= IN_THE_CLEAR
    # positive control: the plaintext run relays embeddings and gradients in the clear
    assert {("Train", "request"), ("Train", "response")} <= _clear_floats(runs["plain"]["records"])
    # the same embeddings (bit-identical runs) occur nowhere in the encrypted run's messages
    rows = []
    for r in runs["plain"]["records"]:
        if r.rpc == "Train" and r.direction == "response":
            for e in r.message().embeddings:
                data = np.frombuffer(e.embedding.data, "<f4").reshape(tuple(e.embedding.shape))
                rows += [x.tobytes() for x in data[:4] if np.ptp(x) > 0]
    assert len(rows) > 50
    assert find_needles([r.data for r in runs["plain"]["records"]], rows[:5])  # control
    assert not find_needles([r.data for r in records], rows)


@pytest.mark.slow
def test_given_an_encrypted_relay_when_evaluating_then_no_answer_covers_part_of_an_observed_set(
    runs: dict[str, dict],
) -> None:
    """The pure-batch leak closed (vfl_core.training.blind_scores): the encrypted run's label
    party answers one Score call per observed set of an evaluation of the test split (here and
    in its other missingness scenarios), for every row of the set, so no aggregate covers
    fewer rows than the report's set (with evaluation batches smaller than a set, one call for
    several batches: tests/test_blind_scoring.py)."""
    sets = {
        row["observed"]: row["samples"]
        for row in runs["encrypted"]["results"]["test"]["rows"]
        if row["observed"] != "all"
    }
    records = runs["encrypted"]["records"]
    calls = [  # the coordinator's view: rows and sizes in the clear, the heads sealed
        m
        for r in records
        if r.rpc == "Score" and r.direction == "request" and (m := r.message()).split == "test"
    ]
    rows = Counter(c.rows.shape[0] for c in calls)
    assert len(sets) > 2 and not Counter(sets.values()) - rows  # each set: one call, all rows
    for call in calls:
        assert call.blind and sum(b.size for b in call.blind) == call.rows.shape[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["plain", "encrypted"])
def test_given_either_run_when_every_message_is_searched_then_no_feature_or_label_vector(
    runs: dict[str, dict], name: str
) -> None:
    """The audits of tests/test_audit.py over every message in both directions: gradients
    (Train/Backward requests), evaluation (Embed, Predict, Score) and everything else."""
    records = runs[name]["records"]
    parties = {d.name: load_party_dir(d) for d in runs[name]["dirs"]}
    payloads = [r.data for r in records]
    vectors = [
        x.tobytes()
        for data in parties.values()
        for split in data.splits.values()
        for x in split.features.reshape(len(split), -1).astype("<f4")
        if np.ptp(x) > 0
    ]
    assert not find_needles(payloads, vectors), "a raw feature vector in a message"
    labels = _batch_labels(records, parties)
    assert len(labels) > 5
    needles = [v.astype(d).tobytes() for v in labels for d in ("<i8", "<i4")]
    assert not find_needles(payloads, needles), "a batch's label vector in a message"
    # the only tensors of a Score answer are aggregates: (C, C) confusion counts, (2, bins)
    # histograms or a task of more classes' (2,) Brier sums, never a vector with a row a sample
    for r in records:
        if r.rpc == "Score" and r.direction == "response":
            for _, t in _tensors(r.message()):
                counts = len(t.shape) == 2 and t.dtype == "int64"
                assert counts or (list(t.shape) == [2] and t.dtype == "float64")


@pytest.mark.slow
def test_given_an_encrypted_relay_when_evaluating_then_the_coordinator_holds_no_prediction(
    runs: dict[str, dict],
) -> None:
    """Evaluation is unpairable by design (vfl_core.inference.blind): every Predict reply of the
    encrypted run is sealed for the label parties and every Score request carries them sealed,
    with no predicted class or probability in the clear, so the coordinator never holds a
    per-row prediction beside the per-batch label aggregates the label party answers."""
    records = runs["encrypted"]["records"]
    # not even the probabilities: every float is sealed but the label party's own aggregates
    # (Brier sums, two a prediction: the test above)
    assert _clear_floats(records) <= {("Score", "response")}
    scores = [r.message() for r in records if r.rpc == "Score" and r.direction == "request"]
    predicts = [r.message() for r in records if r.rpc == "Predict" and r.direction == "response"]
    assert len(scores) > 2 and len(predicts) > 5
    for s in scores:
        assert not s.predictions and not s.scores and s.blind
        for b in s.blind:
            assert b.heads and all(t.sealed and not t.data for t in b.heads.values())
    assert all(p.probabilities.sealed and not p.probabilities.data for p in predicts)
    # control: the plaintext run's Score requests name every row's predicted class
    plain = runs["plain"]["records"]
    assert all(
        r.message().predictions for r in plain if r.rpc == "Score" and r.direction == "request"
    )
