"""The latent-variable VFL as real processes: a coordinator and four vfl-client processes over
gRPC on 127.0.0.1 (digits in four quadrants, the anchor MAR 1 missingness, 200 labels).

- The run matches the in-process simulation of the same seed bit for bit: every round record
  (both stages), every party's final weights and optimiser state, and the test metrics.
- A client SIGKILLed mid-run is a missing block from then on: the others finish both stages and
  the evaluation is scored without it.
- Invariant 4 for the new messages: in every recorded message of a run, no raw feature vector,
  no raw ID and no batch's label vector; the only integers a party sends are its confusion
  counts (Score) and the indices of its labelled rows (LabelledRows).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from harness import Cluster, Coordinator, train_in_process
from test_audit import _batch_labels, _sent_by_party, _tensors, find_needles
from test_equivalence import _assert_same_tensors

from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.missingness import parse_mechanism
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_wire.audit import read_audit

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 240.0
SMALL = ["--dlvm-latent-dim", "8", "--dlvm-hidden", "32", "--dlvm-predict-samples", "8"]
ARGS = ["--method", "dlvm", "--seed", "3", "--batch-size", "128", "--lr", "0.01", *SMALL]


def _dlvm_parties(out: Path, blocks: int) -> list[Path]:
    """Digits in `blocks` blocks, the anchor MAR 1 (block 0 always held), 200 of 1438 labels."""
    mar = parse_mechanism("mar1-anchor")
    return prepare_parties(
        load_digits_dataset(),
        out,
        blocks,
        [0.0] * blocks,
        [0.0] * blocks,
        0.2,
        0,
        mechanisms={"train": mar, "test": mar},
        labels=200,
    )


@pytest.fixture(scope="module")
def party_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Digits in four quadrants, the anchor MAR 1 (block 0 always held), 200 of 1438 labels."""
    return _dlvm_parties(tmp_path_factory.mktemp("dlvm-grpc"), 4)


@dataclass(frozen=True)
class AuditedRun:
    """One finished DLVM run (3 stage-1 and 6 stage-2 epochs): its coordinator, the clients'
    checkpoints and the coordinator's record of every message."""

    coord: Coordinator
    ckpt: Path
    audit: Path


@pytest.fixture(scope="module")
def audited_run(
    tmp_path_factory: pytest.TempPathFactory, party_dirs: list[Path]
) -> Iterator[AuditedRun]:
    """The run the bit-for-bit test and the message search both read: the audit log records
    what crosses the wire and changes no float of it (the bit-for-bit test holds with it on)."""
    root = tmp_path_factory.mktemp("dlvm-run")
    ckpt, audit = root / "checkpoints", root / "messages.audit"
    with Cluster(root / "cluster") as cluster:
        coord, clients = cluster.federation(
            party_dirs,
            epochs=3,
            deadline=60.0,
            extra=[*ARGS, "--dlvm-stage2-epochs", "6", "--audit-log", str(audit)],
            client_extra=lambda d: ["--checkpoint-dir", str(ckpt)],
        )
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(60) == 0, cluster.describe()
        yield AuditedRun(coord, ckpt, audit)


def test_given_dlvm_over_grpc_when_trained_then_bit_identical_to_in_process(
    audited_run: AuditedRun, party_dirs: list[Path]
) -> None:
    coord, ckpt = audited_run.coord, audited_run.ckpt
    results = coord.results()
    assert results is not None
    train = TrainConfig.model_validate(json.loads((coord.out / "config.json").read_text())["train"])
    assert train.method == "dlvm" and train.dlvm.stage2_epochs == 6 and train.dlvm.latent_dim == 8

    parties, records, report = train_in_process(party_dirs, train)

    # every round of both stages: pattern, who answered, the active party's loss, bit for bit
    rounds = coord.rounds()
    assert rounds == [r.to_json() for r in records]
    stage1 = [r for r in rounds if r["epoch"] < 3]
    stage2 = [r for r in rounds if r["epoch"] >= 3]
    assert sum(len(r["pattern"]) > 0 for r in stage1) == len(stage1) > 0
    assert len(stage2) > 0 and all(list(r["losses"]) == ["0"] for r in rounds)
    assert results["method"] == {"labelled_samples": 200}
    for block, party in parties.items():  # weights and optimiser state of every network
        saved = load_checkpoint(ckpt / f"party{block}.pt", train.model_dump_json())
        _assert_same_tensors(saved["state"], party.state_dict(), f"party{block}")
    got_rows, want_rows = results["test"]["rows"], report.to_json()["rows"]
    assert [(r["observed"], r["samples"], r["accuracy"]) for r in got_rows] == [
        (r["observed"], r["samples"], r["accuracy"]) for r in want_rows
    ]
    assert got_rows[-1]["accuracy"] > 0.14  # ten classes; 0.19 measured (a tiny, short run)


# the kill lands at a round count; 10 s deadlines (runs on a worker)
def test_given_a_client_killed_mid_run_when_dlvm_trains_then_the_others_finish_and_score(
    cluster: Cluster, party_dirs: list[Path]
) -> None:
    coord, clients = cluster.federation(
        party_dirs,
        epochs=3,
        deadline=10.0,
        # fine-tuning: every present party updates in stage 2 too (frozen, only the active one)
        extra=[*ARGS, "--dlvm-stage2-epochs", "2", "--dlvm-stage2", "finetune"],
    )
    victim = clients[2]
    rounds_before = cluster.wait_rounds(coord, 15, RUN_TIMEOUT_S)
    victim.signal(signal.SIGKILL)
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        if client is not victim:
            assert client.wait(60) == 0, cluster.describe()

    results = coord.results()
    assert results is not None
    rounds = coord.rounds()
    after = [r for r in rounds[len(rounds_before) + 5 :] if 2 in r["pattern"]]
    assert after, "training ended before the kill took effect"
    # block 2 is a missing block of every later posterior; the others keep updating
    assert all(2 not in r["present"] and 2 not in r["updated"] for r in after)
    assert all(r["updated"] == r["present"] and r["losses"] for r in after)
    assert any(r["epoch"] >= 3 for r in rounds)  # stage 2 ran
    overall = results["test"]["rows"][-1]
    assert overall["observed"] == "all" and overall["samples"] > 0
    assert all("2" not in r["observed"].split(",") for r in results["test"]["rows"])


def test_given_an_audited_dlvm_run_when_searching_messages_then_no_feature_id_or_label_leaves(
    audited_run: AuditedRun, party_dirs: list[Path]
) -> None:
    records = read_audit(audited_run.audit)
    parties = {d.name: load_party_dir(d) for d in party_dirs}
    kinds = {r.rpc for r in records if r.direction == "request"}
    assert kinds >= {"Embed", "DlvmDecode", "DlvmStep", "DlvmBackward", "LabelledRows"}
    assert "DlvmPredict" in kinds and "Score" in kinds
    payloads = [r.data for r in records]

    vectors = [
        x.tobytes()
        for data in parties.values()
        for split in data.splits.values()
        for x in split.features.reshape(len(split), -1).astype("<f4")
        if np.ptp(x) > 0
    ]
    assert len(vectors) > 3000 and not find_needles(payloads, vectors), "a feature vector left"
    assert b"digits-" not in b"".join(payloads), "a raw ID left a party"

    from_parties = [r for r in records if _sent_by_party(r) and r.direction != "error"]
    for record in from_parties:
        for path, tensor in _tensors(record.message()):
            if tensor.dtype in ("int64", "int32"):
                assert (record.rpc, path.split("[")[0]) in {
                    ("Score", "confusion"),
                    ("LabelledRows", "rows"),
                }, path
    labels = _batch_labels(records, parties)
    assert len(labels) > 20
    needles = [v.astype(d).tobytes() for v in labels for d in ("<i8", "<i4")]
    assert not find_needles([r.data for r in from_parties], needles), "a label vector left"


def test_given_the_default_stage2_over_grpc_when_audited_then_no_gradient_message(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Stage 2 alone (no stage-1 epoch), the paper's frozen default: no DlvmBackward request,
    and no gradient in any message (the steps' replies carry none, Decode none). Two parties,
    the active one and one other: what a message carries does not depend on how many there
    are, and each is a client process less to start."""
    two = _dlvm_parties(tmp_path / "parties", 2)
    audit = tmp_path / "stage2.audit"
    extra = [*ARGS, "--dlvm-stage2-epochs", "1", "--audit-log", str(audit)]
    coord, clients = cluster.federation(two, epochs=0, deadline=60.0, extra=extra)
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(60) == 0, cluster.describe()
    records = read_audit(audit)
    kinds = {r.rpc for r in records if r.direction == "request"}
    assert {"DlvmDecode", "DlvmStep", "LabelledRows"} <= kinds and "DlvmBackward" not in kinds
    steps = [r for r in records if r.rpc in ("DlvmStep", "DlvmDecode") and r.direction != "error"]
    assert steps
    for record in steps:
        paths = [path for path, _ in _tensors(record.message())]
        assert not any("grad" in path for path in paths), (record.rpc, paths)
