"""The encrypted relay's cost and what the coordinator learns with it (issue 32 item 2).

    python -m benchmarks.privacy.relay --data-path ../shared/data --repeats 3 --epochs 2

UCI Credit (4000 rows, benchmarks.tabular.tables), K parties (`--parties`, columns dealt
round-robin): block 0 holds the labels, the others are feature-only. The parties run behind the real
`PartyServicer` on gRPC servers in this process (their relay keys from certificates made by `vfl
certs`'s code), the coordinator's round engine drives them through `GrpcTransport`; so the process's
CPU time is the whole federation's, and an interceptor on the coordinator's channels sees exactly
what the coordinator relays. Each repeat trains the same federation twice, plaintext then
`encrypt_relay`, side by side; reported: CPU milliseconds per training round (medians over the
repeats and their ratio), bytes per round, and that both runs end with the same weights (bit for
bit).

The coordinator's attacks, on what it relays to the feature-only party (the label party's
gradient for block 1's embedding, per round): the norm and direction attacks of Li et al. 2022
(benchmarks/privacy/) and the known-label k-NN. In the clear it reads each row's gradient as
float32; sealed, it can only read the box: AES-GCM keeps positions, so it slices the ciphertext
by rows as it would the plaintext and scores each row's bytes both as float32 (non-finite values
as 0) and as unsigned bytes. Each AUC is reported as max(AUC, 1 - AUC), as in privacy.md, and
averaged over the repeats (each encrypted run seals under fresh keys and nonces).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from benchmarks.privacy import direction_attack, knn_attack, norm_attack, write_parties
from benchmarks.tabular.tables import tables
from vfl_cli.certs_cmd import create_federation
from vfl_client.servicer import PartyServicer
from vfl_coordinator.config import Deadlines
from vfl_coordinator.registry import Registry
from vfl_coordinator.transport import GrpcTransport
from vfl_core.config import TrainConfig
from vfl_core.data.tabular import load_table_federation
from vfl_core.training.engine import Federation
from vfl_core.training.party import Party
from vfl_wire.channels import bind, make_server
from vfl_wire.relay_box import HEADER, NONCE_BYTES, TAG_BYTES
from vfl_wire.relay_crypto import RelayCrypto
from vfl_wire.security import GuardInterceptor, load_identity, party_policy
from vfl_wire.tensors import decode_array, decode_float
from vfl_wire.v1 import vfl_pb2_grpc

RUN = "relay-bench"
FEATURE_BLOCK, LABEL_BLOCK = 1, 0


class Recorder(grpc.UnaryUnaryClientInterceptor):
    """The coordinator's view: every Train request and reply, and the bytes of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        self.bytes = 0

    def intercept_unary_unary(self, continuation, details, request):
        outcome = continuation(details, request)
        reply = outcome.result()
        self.bytes += request.ByteSize() + reply.ByteSize()
        if details.method.endswith("/Train"):
            self.calls.append((request.header.party_id, request, reply))
        return outcome


@contextlib.contextmanager
def federation(
    parties: dict[int, Party],
    certs: Path,
    interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
    deadlines: Deadlines | None = None,
    on_round: Any = None,
) -> Iterator[Federation]:
    """The parties behind real servicers (each with its relay crypto), and a Federation over
    gRPC through `interceptors` (a recorder, a rewriting coordinator); tests use it too."""
    registry, servers, keys = Registry(len(parties)), [], {}
    try:
        for block, party in parties.items():
            servicer = PartyServicer(party.party_id)
            servicer.relay = RelayCrypto(load_identity(certs, party.party_id), block)
            keys[block] = servicer.relay.key_message
            servicer.attach(party, RUN)
            server = make_server(8, [GuardInterceptor(secure=False, policy=party_policy)])
            vfl_pb2_grpc.add_PartyServicer_to_server(servicer, server)
            port = bind(server, "127.0.0.1:0")
            server.start()
            servers.append(server)
            registry.register(party.info, f"127.0.0.1:{port}")
        train = next(iter(parties.values())).config
        transport = GrpcTransport(
            registry,
            RUN,
            deadlines or Deadlines(),
            interceptors=interceptors,
            wire_dtype=train.wire_dtype,
            relay_keys=(lambda: [keys[b] for b in sorted(keys)]) if train.encrypt_relay else None,
        )
        try:
            yield Federation(transport, train, progress=False, on_round=on_round)
        finally:
            transport.close()
    finally:
        for server in servers:
            server.stop(0).wait()


def row_views(t: Any, wire: str = "float32") -> list[np.ndarray]:
    """What the coordinator can make of a relayed (B, d) tensor, row by row: the floats in the
    clear, or the sealed box for the feature-only party sliced by rows (as float32, as bytes)."""
    rows, width = tuple(t.shape)
    if not t.sealed:
        return [decode_float(t, wire)]
    box = t.sealed[FEATURE_BLOCK]
    body = np.frombuffer(box[HEADER.size + NONCE_BYTES : len(box) - TAG_BYTES], np.uint8)
    with np.errstate(invalid="ignore", over="ignore"):
        as_float = body.view("<f4").astype(np.float64).reshape(rows, width)
    as_float[~np.isfinite(as_float)] = 0.0
    return [as_float, body.reshape(rows, width * 4).astype(np.float64)]


def coordinator_attacks(
    recorder: Recorder, labels: np.ndarray, seed: int
) -> dict[str, dict[str, float]]:
    """The attacks on the label party's gradients for block 1, over the whole run."""
    rows_of: dict[int, np.ndarray] = {}
    for party, request, _ in recorder.calls:
        if party == f"party{LABEL_BLOCK}":
            for e in request.embed:
                rows_of[e.round_id] = decode_array(e.rows)
    views: list[list[np.ndarray]] = []
    truth: list[np.ndarray] = []
    for party, _, reply in recorder.calls:
        if party != f"party{LABEL_BLOCK}":
            continue
        for fused in reply.fused:
            if FEATURE_BLOCK in fused.grads and fused.round_id in rows_of:
                views.append(row_views(fused.grads[FEATURE_BLOCK]))
                truth.append(labels[rows_of[fused.round_id]])
    out: dict[str, dict[str, float]] = {}
    names = ["float32"] if len(views[0]) == 1 else ["float32", "bytes"]
    for v, view in enumerate(names):
        grads, y = np.concatenate([x[v] for x in views]), np.concatenate(truth)
        scores = {
            "norm": norm_attack(grads, y),
            "direction": direction_attack([(x[v], t) for x, t in zip(views, truth, strict=True)]),
            "knn": knn_attack(grads, y, 100, seed),
        }
        out[view] = {name: value for name, value in scores.items() if value is not None}
    return out


def mean_attacks(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per view and attack, the mean AUC over the runs."""
    first = runs[0]["attacks"]
    return {
        view: {a: round(statistics.mean(r["attacks"][view][a] for r in runs), 4) for a in attacks}
        for view, attacks in first.items()
    }


def run_once(data: list, certs: Path, train: dict[str, Any], encrypt: bool) -> dict[str, Any]:
    config = TrainConfig.model_validate({**train, "encrypt_relay": encrypt})
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, config, secret=b"s") for d in data}
    recorder, rounds = Recorder(), []
    slow = Deadlines(embed=300, fuse=300, backward=300)  # a loaded machine: never a timeout
    with federation(parties, certs, [recorder], slow, rounds.append) as fed:
        fed.align()
        start = time.process_time()
        fed.train()
        cpu = time.process_time() - start
    count = len(rounds)
    labels = parties[LABEL_BLOCK].data.splits["train"].labels
    return {
        "encrypt_relay": encrypt,
        "rounds": count,
        "cpu_ms_per_round": 1000 * cpu / count,
        "bytes_per_round": recorder.bytes / count,
        "weights": {b: p.parameters_vector().tobytes() for b, p in parties.items()},
        "attacks": coordinator_attacks(recorder, np.asarray(labels), train["seed"]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parties", type=int, default=2, help="K: block 0 holds the labels")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/relay.json"))
    args = parser.parse_args(argv)
    table = tables(args.data_path, False)["credit"](args.seed, False)
    train = {"seed": args.seed, "epochs": args.epochs, "early_stop_patience": 0}
    runs: list[dict[str, Any]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vfl-relay-") as tmp:
        data = load_table_federation(write_parties(table, args.parties, Path(tmp)))
        certs = Path(tmp) / "certs"
        create_federation(certs, [f"party{k}" for k in range(args.parties)], [])
        for _ in range(args.repeats):
            for encrypt in (False, True):
                runs.append(run_once(data, certs, train, encrypt))
    plain = [r for r in runs if not r["encrypt_relay"]]
    sealed = [r for r in runs if r["encrypt_relay"]]
    same = all(p["weights"] == s["weights"] for p, s in zip(plain, sealed, strict=True))
    summary = {
        "command": "python -m benchmarks.privacy.relay "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "seconds": round(time.perf_counter() - start, 1),
        "parties": args.parties,
        "rounds": plain[0]["rounds"],
        "bit_identical": same,
        "cpu_ms_per_round": {
            "plain": statistics.median(r["cpu_ms_per_round"] for r in plain),
            "encrypted": statistics.median(r["cpu_ms_per_round"] for r in sealed),
            "ratio": statistics.median(
                s["cpu_ms_per_round"] / p["cpu_ms_per_round"]
                for p, s in zip(plain, sealed, strict=True)
            ),
            "each": [[r["encrypt_relay"], round(r["cpu_ms_per_round"], 2)] for r in runs],
        },
        "bytes_per_round": {
            "plain": plain[0]["bytes_per_round"],
            "encrypted": sealed[0]["bytes_per_round"],
        },
        "coordinator_auc": {"plain": mean_attacks(plain), "encrypted": mean_attacks(sealed)},
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
