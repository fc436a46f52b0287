"""Invariant 5 with real processes over TCP: a party's death, hang or garbage never stops the
federation. Each test starts a coordinator and four clients (digits, K=4) and injects one fault:
SIGKILL during and after training, SIGSTOP/SIGCONT during training, bad messages at the wire."""

from __future__ import annotations

import csv
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from harness import SECRET, Client, Cluster, Coordinator
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_core.protocol import PROTOCOL_VERSION
from vfl_core.training.alignment import batch_digest, hash_ids
from vfl_wire import convert
from vfl_wire.tensors import encode_array
from vfl_wire.v1 import vfl_pb2

# `alone` (one at a time on idle cores): the killed party's replies within a second of the
# deadline. The kill and the freeze mid-training land at a round count and wait for rounds
# (generous timeouts), and the bad-message tests only send requests to a serving federation:
# they run on a worker.
pytestmark = pytest.mark.slow

DEADLINE_S = 2.0
RUN_TIMEOUT_S = 180.0
RPC_TIMEOUT_S = 30.0
EMBED_DIM = 64  # the coordinator's default ModelConfig.embed_dim


@pytest.fixture(scope="module")
def serving(
    tmp_path_factory: pytest.TempPathFactory, party_dirs: list[Path]
) -> Iterator[tuple[Cluster, Coordinator, list[Client]]]:
    """A trained federation that keeps serving, shared by the bad-input tests (they must leave
    it as they found it, which is what they check)."""
    with Cluster(tmp_path_factory.mktemp("serving")) as c:
        coord, clients = c.federation(party_dirs, epochs=1, deadline=DEADLINE_S, serve=True)
        c.wait_serving(coord, RUN_TIMEOUT_S)
        yield c, coord, clients


# ------------------------------------------------------------------------------ helpers


def _client_of(clients: list[Client], block: int) -> Client:
    return next(c for c in clients if c.block == block)


def _status(cluster: Cluster, coord: Coordinator) -> vfl_pb2.StatusReply:
    stub = cluster.stub(coord)
    return stub.Status(vfl_pb2.StatusRequest(header=convert.header("", "")), timeout=RPC_TIMEOUT_S)


def _party_state(cluster: Cluster, coord: Coordinator, block: int) -> str:
    return next(p.state for p in _status(cluster, coord).parties if p.block == block)


def _observed(row_name: str) -> set[int]:
    return set() if row_name == "all" else {int(b) for b in row_name.split(",")}


def _checkpoint(coord: Coordinator, directory: Path, block: int) -> dict:
    """A client's end-of-run checkpoint, checked against the run's TrainConfig."""
    config = json.loads((coord.out / "config.json").read_text())["train"]
    saved = load_checkpoint(directory / f"party{block}.pt", json.dumps(config))
    assert saved["meta"]["run_id"] == coord.run_id and saved["meta"]["block"] == block
    assert saved["meta"]["last_round"] >= 0
    assert {"f", "f_opt", "g", "g_opt"} <= saved["state"].keys()
    return saved


def _transitions(results: dict, block: int) -> list[tuple[str, str]]:
    return [(t["old"], t["new"]) for t in results["transitions"] if t["block"] == block]


def _assert_survivors_exit_after_shutdown(
    cluster: Cluster, clients: list[Client], gone: set[int]
) -> None:
    for client in clients:
        if client.block not in gone:
            assert client.wait(30) == 0, cluster.describe()
            assert "coordinator asked to shut down" in client.log()


# ------------------------------------------------------------------------------ (a) SIGKILL


def test_given_client_killed_mid_training_when_run_continues_then_survivors_finish_with_metrics(
    cluster: Cluster, party_dirs: list[Path]
) -> None:
    dead = 1
    coord, clients = cluster.federation(party_dirs, epochs=6, deadline=DEADLINE_S)
    before = cluster.wait_rounds(coord, 5, RUN_TIMEOUT_S)
    _client_of(clients, dead).signal(signal.SIGKILL)

    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    _assert_survivors_exit_after_shutdown(cluster, clients, {dead})

    results, rounds = coord.results(), coord.rounds()
    assert results is not None and results["rounds"] == len(rounds) > len(before)
    assert len(results["epochs"]) == 6
    # blocks held by the dead party were used until the kill...
    assert all(dead in r["present"] for r in rounds[: len(before)] if dead in r["pattern"])
    # ...and never after the first round that ran without it
    first_miss = next(
        i for i, r in enumerate(rounds) if dead in r["pattern"] and dead not in r["present"]
    )
    later = rounds[first_miss:]
    assert sum(dead in r["pattern"] for r in later) > 10
    assert all(dead not in r["present"] and dead not in r["updated"] for r in later)
    assert all(dead not in map(int, r["losses"]) for r in later)
    assert all(len(r["present"]) >= 1 and r["losses"] for r in later if set(r["pattern"]) - {dead})
    assert ("up", "down") in _transitions(results, dead)
    # the test metrics were computed by the survivors alone
    test = results["test"]
    assert test is not None and test["rows"][-1]["observed"] == "all"
    assert test["rows"][-1]["samples"] > 0 and 0 < test["rows"][-1]["accuracy"] <= 1
    assert all(dead not in _observed(row["observed"]) for row in test["rows"])


@pytest.mark.alone
def test_given_client_killed_while_serving_when_evaluate_and_predict_then_answer_within_deadline(
    cluster: Cluster, party_dirs: list[Path], tmp_path: Path
) -> None:
    dead, stopped = 2, 3
    ckpt = tmp_path / "checkpoints"
    coord, clients = cluster.federation(
        party_dirs,
        epochs=1,
        deadline=DEADLINE_S,
        serve=True,
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt)],
    )
    cluster.wait_serving(coord, RUN_TIMEOUT_S)
    _client_of(clients, dead).signal(signal.SIGKILL)
    assert _client_of(clients, dead).wait(10) == -signal.SIGKILL
    stub = cluster.stub(coord)
    header = convert.header("", "")

    start = time.monotonic()
    report = stub.Evaluate(vfl_pb2.EvaluateRequest(header=header, split="test"), timeout=30)
    evaluate_s = time.monotonic() - start
    start = time.monotonic()
    request = vfl_pb2.FederatedPredictRequest(header=header, split="test", all_rows=True)
    predicted = stub.Predict(request, timeout=30)
    predict_s = time.monotonic() - start

    assert evaluate_s <= DEADLINE_S + 1.0, f"Evaluate took {evaluate_s:.2f}s"
    assert predict_s <= DEADLINE_S + 1.0, f"Predict took {predict_s:.2f}s"
    # Evaluate: accuracy rows for the observed sets that remain, none with the dead party
    sets = [row for row in report.rows if row.observed != "all"]
    assert sets and all(dead not in _observed(row.observed) for row in sets)
    assert all(row.samples > 0 and 0 <= row.accuracy <= 1 for row in report.rows)
    assert report.rows[-1].observed == "all" and report.rows[-1].samples > 0
    assert dead not in report.live_blocks
    # Predict: every test sample answered, O' never holds the dead party
    assert len(predicted.rows) > 0
    for row in predicted.rows:
        assert dead not in row.observed_blocks
        assert dead not in row.party_probabilities
        if row.party_probabilities:
            assert row.HasField("federation_probabilities") and row.predicted_class >= 0
    assert sum(bool(row.observed_blocks) for row in predicted.rows) > len(predicted.rows) // 2
    _check_cli_predict_and_evaluate(coord, party_dirs[0], tmp_path, dead)

    # a client stopped by a signal saves its state too
    _client_of(clients, stopped).signal(signal.SIGTERM)
    assert _client_of(clients, stopped).wait(30) == 0, cluster.describe()
    assert _checkpoint(coord, ckpt, stopped)["meta"]["reason"] == "stopped by a signal"

    coord.signal(signal.SIGTERM)
    assert coord.wait(30) == 0, cluster.describe()
    _assert_survivors_exit_after_shutdown(cluster, clients, {dead, stopped})
    for block in (0, 1):
        assert _checkpoint(coord, ckpt, block)["meta"]["reason"] == "run finished"
    assert not (ckpt / f"party{dead}.pt").exists()


def _check_cli_predict_and_evaluate(
    coord: Coordinator, party_dir: Path, tmp_path: Path, dead: int
) -> None:
    """`vfl predict` by raw IDs (hashed on this side) and `vfl evaluate` against the live run."""
    ids = [str(i) for i in np.load(party_dir / "test" / "ids.npy")[:3]]
    out = tmp_path / "predictions.csv"
    runner = CliRunner()
    args = ["predict", "--coordinator", coord.address, "--secret", SECRET, "--ids", ",".join(ids)]
    args += ["--out", str(out), "--insecure"]  # the harness runs plaintext unless given certs
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert {r["id"] for r in rows} == set(ids)  # raw IDs back, though only hashes crossed
    assert all(str(dead) not in r["observed_blocks"].split("+") for r in rows)
    assert all(int(r["predicted_class"]) >= 0 for r in rows)
    result = runner.invoke(app, ["evaluate", "--coordinator", coord.address, "--insecure"])
    assert result.exit_code == 0, result.output
    assert (
        "live blocks: " in result.output
        and f"{dead}," not in result.output.split("live blocks: ")[1][:8]
    )


# ------------------------------------------------------------------------------ (c) SIGSTOP


def test_given_client_frozen_mid_training_when_deadline_passes_then_rounds_go_on_and_it_rejoins(
    cluster: Cluster, party_dirs: list[Path]
) -> None:
    frozen = 3
    coord, clients = cluster.federation(
        party_dirs, epochs=6, deadline=DEADLINE_S, extra=["--retry-every", "5"]
    )
    victim = _client_of(clients, frozen)
    cluster.wait_rounds(coord, 5, RUN_TIMEOUT_S)
    victim.signal(signal.SIGSTOP)
    stopped_at = len(coord.rounds())

    def missed_round() -> dict | None:
        later = coord.rounds()[stopped_at + 1 :]
        missed = (r for r in later if frozen in r["pattern"] and frozen not in r["present"])
        return next(missed, None)

    cluster.wait_for(missed_round, 60, "a round that completes without the frozen party")
    cluster.wait_for(
        lambda: _party_state(cluster, coord, frozen) == "down", 60, "the frozen party marked down"
    )
    # The party can be marked down while the round of its third miss is still running, before
    # that round's record is written: wait for it (rounds go on quickly without the party).
    cluster.wait_for(
        lambda: len(coord.rounds()) >= stopped_at + 3, 60, "two rounds logged after the freeze"
    )
    frozen_rounds = coord.rounds()[stopped_at + 1 :]
    victim.signal(signal.SIGCONT)
    resumed_at = len(coord.rounds())

    def rejoined() -> dict | None:
        later = coord.rounds()[resumed_at:]
        return next((r for r in later if frozen in r["updated"]), None)

    back = cluster.wait_for(rejoined, 60, "a round the resumed party trained in")
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    _assert_survivors_exit_after_shutdown(cluster, clients, set())

    # while frozen, rounds completed (after the deadline) without it: the log advanced. Two
    # suffice: freezing between Embed and Fuse costs two misses (Fuse, Backward) in one round.
    assert len(frozen_rounds) >= 2
    assert all(frozen not in r["present"] for r in frozen_rounds[1:])
    assert any(set(r["present"]) - {frozen} and r["losses"] for r in frozen_rounds)
    # after SIGCONT it trained again: present, updated, with a head loss of its own
    assert frozen in back["present"] and str(frozen) in back["losses"]
    results = coord.results()
    assert results is not None
    transitions = _transitions(results, frozen)
    assert transitions[:2] == [("up", "down"), ("down", "up")], transitions


# ------------------------------------------------------------------------------ (d) bad input


class _Party:
    """Valid and invalid requests for one live client, built from its own directory."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.client, self.run_id = client, run_id
        self.party_id = f"party{client.block}"
        self.header = convert.header(run_id, self.party_id)
        self.ids = np.load(client.data / "test" / "ids.npy")
        self.hashes = hash_ids(self.ids.tolist(), SECRET.encode())

    def embed(self, rows: np.ndarray, *, digest: bytes | None = None, **kw) -> vfl_pb2.EmbedRequest:
        if digest is None:
            digest = batch_digest(self.hashes[int(r)] for r in rows)
        fields = {"round_id": 10**6, "split": "test", "train": False, **kw}
        return vfl_pb2.EmbedRequest(
            header=self.header, rows=encode_array(rows), digest=digest, **fields
        )

    def valid_embed(self) -> vfl_pb2.EmbedRequest:
        return self.embed(np.arange(5, dtype=np.int64))


def _nan_matrix(rows: int) -> np.ndarray:
    m = np.ones((rows, EMBED_DIM), dtype=np.float32)
    m[1, 2] = np.nan
    return m


def _expect(code: grpc.StatusCode, call, request, contains: str = "") -> str:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=RPC_TIMEOUT_S)
    assert err.value.code() == code, f"{err.value.code()} {err.value.details()}"
    assert contains in (err.value.details() or "")
    return err.value.details() or ""


def _bad_party_requests(p: _Party, n_test: int) -> list[tuple[str, str, object, grpc.StatusCode]]:
    """(name, rpc, request, expected code): each breaks exactly one rule."""
    rows = np.arange(5, dtype=np.int64)
    other_party = convert.header(p.run_id, "party-somebody-else")
    embeddings = {p.client.block: encode_array(_nan_matrix(5))}
    good_embeddings = {9: encode_array(np.ones((5, EMBED_DIM), np.float32))}
    invalid, stale = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION
    denied = grpc.StatusCode.PERMISSION_DENIED
    return [
        ("wrong run id", "IdHashes", vfl_pb2.IdHashesRequest(
            header=convert.header("another-run", p.party_id), split="test"), denied),
        ("wrong party id", "IdHashes", vfl_pb2.IdHashesRequest(
            header=other_party, split="test"), denied),
        ("no header", "Embed", vfl_pb2.EmbedRequest(round_id=1, split="test"), denied),
        ("float rows with NaN", "Embed", vfl_pb2.EmbedRequest(
            header=p.header, split="test", rows=encode_array(np.array([0, np.nan], np.float32)),
            digest=b"x"), invalid),
        ("rows out of range", "Embed", p.embed(np.array([0, n_test], np.int64), digest=b"x"),
            invalid),
        ("negative row", "Embed", p.embed(np.array([-1, 0], np.int64), digest=b"x"), invalid),
        ("wrong digest", "Embed", p.embed(rows, digest=b"\0" * 32), invalid),
        ("unknown split", "Embed", p.embed(rows, split="validation"), invalid),
        ("NaN embedding in Predict", "Predict", vfl_pb2.PredictRequest(
            header=p.header, request_id=1, embeddings=embeddings), invalid),
        ("float64 embedding in Predict", "Predict", vfl_pb2.PredictRequest(
            header=p.header, request_id=1,
            embeddings={0: encode_array(np.ones((5, EMBED_DIM), np.float64))}), invalid),
        ("embedding of the wrong width", "Predict", vfl_pb2.PredictRequest(
            header=p.header, request_id=1,
            embeddings={0: encode_array(np.ones((5, EMBED_DIM + 1), np.float32))}), invalid),
        ("NaN embedding in Fuse", "Fuse", vfl_pb2.FuseRequest(
            header=p.header, round_id=1, embeddings=embeddings), invalid),
        ("NaN gradient in Backward", "Backward", vfl_pb2.BackwardRequest(
            header=p.header, round_id=1, has_grad=True, grad=encode_array(_nan_matrix(5))),
            invalid),
        ("stale training round", "Embed", p.embed(rows, round_id=0, split="test", train=True),
            stale),
        ("fuse for a round never embedded", "Fuse", vfl_pb2.FuseRequest(
            header=p.header, round_id=0, embeddings=good_embeddings), stale),
        ("backward for an old round", "Backward", vfl_pb2.BackwardRequest(
            header=p.header, round_id=0), stale),
    ]  # fmt: skip


def test_given_live_client_when_sent_bad_messages_then_refused_with_codes_and_still_serving(
    serving: tuple[Cluster, Coordinator, list[Client]],
) -> None:
    cluster, coord, clients = serving
    client = _client_of(clients, 0)
    party = _Party(client, coord.run_id)
    stub = cluster.party_stub(client)
    valid = stub.Embed(party.valid_embed(), timeout=RPC_TIMEOUT_S)
    assert valid.embedding.shape == [5, EMBED_DIM]

    for name, rpc, request, code in _bad_party_requests(party, len(party.ids)):
        details = _expect(code, getattr(stub, rpc), request)
        assert details, f"{name}: refusal without a message"
        again = stub.Embed(party.valid_embed(), timeout=RPC_TIMEOUT_S)  # still serving
        assert again.embedding == valid.embedding, f"after {name}: the party changed"

    assert client.alive()
    report = cluster.stub(coord).Evaluate(
        vfl_pb2.EvaluateRequest(header=convert.header("", ""), split="test"), timeout=60
    )
    assert report.rows[0].observed == "0,1,2,3" and sorted(report.live_blocks) == [0, 1, 2, 3]


def test_given_live_coordinator_when_sent_bad_messages_then_refused_with_codes_and_still_serving(
    serving: tuple[Cluster, Coordinator, list[Client]],
) -> None:
    cluster, coord, clients = serving
    stub = cluster.stub(coord)
    ok_header = convert.header("", "")
    holder = _client_of(clients, 0)
    info = vfl_pb2.PartyInfoMsg(
        party_id="intruder", block=0, num_blocks=4, dataset="digits", feature_shape=[1, 4, 4],
        num_classes=10, has_labels=True, samples={"train": 10}, protocol_version=PROTOCOL_VERSION,
    )  # fmt: skip
    taken = vfl_pb2.RegisterRequest(header=ok_header, info=info, address="127.0.0.1:1")
    old_protocol = vfl_pb2.RegisterRequest(
        header=vfl_pb2.Header(protocol_version=99), info=info, address="127.0.0.1:1"
    )
    no_address = vfl_pb2.RegisterRequest(header=ok_header, info=info)
    bad_split = vfl_pb2.EvaluateRequest(header=ok_header, split="validation")
    bad_predict = vfl_pb2.FederatedPredictRequest(header=ok_header, split="nope", all_rows=True)

    details = _expect(grpc.StatusCode.ALREADY_EXISTS, stub.Register, taken, "party0")
    assert "block 0" in details
    for call, request in [
        (stub.Register, old_protocol),
        (stub.Register, no_address),
        (stub.Evaluate, bad_split),
        (stub.Predict, bad_predict),
    ]:
        _expect(grpc.StatusCode.INVALID_ARGUMENT, call, request)
        assert _status(cluster, coord).state == "serving"  # still up

    report = stub.Evaluate(vfl_pb2.EvaluateRequest(header=ok_header, split="test"), timeout=60)
    assert sorted(report.live_blocks) == [0, 1, 2, 3] and report.rows[-1].samples > 0
    assert {p.party_id for p in _status(cluster, coord).parties} == {f"party{k}" for k in range(4)}
    assert holder.alive()
