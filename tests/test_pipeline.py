"""The pipelined engine (vfl_core/training/pipeline.py) against the sequential one
(Federation.run_round).

Exact pipelining (staleness 0, the default) must give the sequential engine's parameters,
optimiser states, round records and test metrics bit for bit: for LASER-VFL and the baselines,
with missing blocks and feature-only parties, with injected party failures, with checkpoints
draining the pipeline, in process and over real gRPC servers. Bounded staleness must change the
math only as documented: an embedding misses at most S of its party's earlier updates, the same
seed gives the same numbers in every transport (the two lanes may interleave in any order over
gRPC), and every round is accounted for.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import numpy as np
import pytest
from harness import party_servers

from vfl_coordinator.config import Deadlines
from vfl_coordinator.transport import GrpcTransport
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError
from vfl_core.protocol import TrainCall, TrainResult
from vfl_core.training.engine import Callbacks, Federation, RoundRecord
from vfl_core.training.faults import FaultConfig, FaultyTransport
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

K = 4
SECRET = b"pipeline-test"
RUN = "pipeline-run"


def config(**kwargs: object) -> TrainConfig:
    base: dict[str, object] = {
        "seed": 0,
        "epochs": 2,
        "batch_size": 64,
        "eval_batch_size": 256,
        "lr": 1e-2,
        "model": ModelConfig(representation="mlp", embed_dim=8, hidden=(16,)),
    }
    return TrainConfig.model_validate({**base, **kwargs})


@pytest.fixture(scope="module")
def datas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[PartyData]]:
    """digits with missing blocks: every party with labels, only blocks 0 and 2, or only block 0
    with label-only rows (it fuses batches it holds no features of)."""
    root = tmp_path_factory.mktemp("pipeline")
    out = {}
    for name, labels, p_miss, keep in (
        ("all", None, 0.1, False),
        ("some", [0, 2], 0.1, False),
        ("label-only", [0], 0.3, True),  # the label party also holds labels of rows it misses
    ):
        paths = prepare_parties(
            load_digits_dataset(), root / name, K, [p_miss] * K, [p_miss] * K, 0.2, seed=0,
            label_blocks=labels, keep_labels=keep,
        )  # fmt: skip
        out[name] = [load_party_dir(p) for p in paths]
    return out


def parties_of(data: list[PartyData], cfg: TrainConfig) -> dict[int, Party]:
    return {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in data}


Wrap = Callable[[object], object]


def train(
    data: list[PartyData],
    cfg: TrainConfig,
    *,
    pipeline: bool = True,
    wrap: Wrap | None = None,
    transport: object | None = None,
    parties: dict[int, Party] | None = None,
    **kwargs: object,
) -> tuple[dict[int, Party], list[RoundRecord], dict]:
    parties = parties if parties is not None else parties_of(data, cfg)
    inner = transport if transport is not None else InProcessTransport(parties)
    records: list[RoundRecord] = []
    fed = Federation(
        wrap(inner) if wrap else inner,  # type: ignore[arg-type]
        cfg,
        progress=False,
        on_round=records.append,
        pipeline=pipeline,
        **kwargs,
    )
    fed.align()
    fed.train()
    return parties, records, fed.evaluate("test").to_json()


def assert_same(a: tuple, b: tuple) -> None:
    parties_a, records_a, report_a = a
    parties_b, records_b, report_b = b
    assert [r.to_json() for r in records_a] == [r.to_json() for r in records_b]
    for block, party in parties_a.items():
        np.testing.assert_array_equal(
            party.parameters_vector(), parties_b[block].parameters_vector()
        )
        for key, opt in party.models.rep_opts.items():
            other = parties_b[block].models.rep_opts[key].state_dict()["state"]
            for i, state in opt.state_dict()["state"].items():
                for name, value in state.items():
                    assert np.array_equal(np.asarray(value), np.asarray(other[i][name])), name
    assert report_a == report_b


# ------------------------------------------------------------------------ exact pipelining


@pytest.mark.parametrize(
    ("method", "labels"),
    [("laser", "all"), ("laser", "some"), ("laser", "label-only"), ("svfl", "all"),
     ("combinatorial", "all"), ("plug", "some"), ("stale", "all")],
)  # fmt: skip
def test_given_exact_pipelining_when_trained_then_bit_identical_to_the_sequential_engine(
    datas: dict[str, list[PartyData]], method: str, labels: str
) -> None:
    cfg = config(method=method)
    sequential = train(datas[labels], cfg, pipeline=False)
    pipelined = train(datas[labels], cfg)
    assert len(pipelined[1]) > 20 and any(len(r.pattern) < K for r in pipelined[1])
    assert_same(pipelined, sequential)


def test_given_injected_party_failures_when_pipelined_then_same_in_process_and_over_grpc(
    datas: dict[str, list[PartyData]],
) -> None:
    """Parties fail and come back (R_d 0.3, R_u 0.5): the same draws reach the same calls in
    both transports. (Not the sequential engine's rounds: there a round's Backward is
    acknowledged before the next round's callees are chosen, here with the next Embed, so a
    comeback can be registered one round apart; docs in vfl_core/training/pipeline.py.)"""
    cfg = config()
    faults = FaultConfig(fail_rate=0.3, rejoin_rate=0.5)

    def wrap(inner: object) -> FaultyTransport:
        return FaultyTransport(inner, faults, cfg.seed)  # type: ignore[arg-type]

    local = train(datas["all"], cfg, wrap=wrap)
    assert any(r.present != r.pattern for r in local[1])  # the faults did bite
    remote = parties_of(datas["all"], cfg)
    with party_servers(remote, RUN) as registry:
        transport = GrpcTransport(registry, RUN, Deadlines())
        try:
            got = train(datas["all"], cfg, wrap=wrap, transport=transport, parties=remote)
        finally:
            transport.close()
    assert_same(got, local)


def test_given_checkpoints_when_pipelined_then_the_pipeline_drains_there_and_math_is_unchanged(
    datas: dict[str, list[PartyData]],
) -> None:
    cfg = config()
    seen: list[tuple[int, int]] = []  # (round checkpointed, last round whose record was out)
    parties = parties_of(datas["all"], cfg)
    records: list[RoundRecord] = []
    transport = InProcessTransport(parties, saver=lambda p, r: None)
    fed = Federation(transport, cfg, progress=False, on_round=records.append, checkpoint_every=7)
    fed.observers.append(
        Callbacks(checkpoint=lambda r, saved: seen.append((r, records[-1].round_id)))
    )
    fed.align()
    fed.train()
    assert seen and all(r == last for r, last in seen[:-1])
    assert [r for r, _ in seen[:-1]] == list(range(6, len(records) - 1, 7))
    assert_same((parties, records, fed.evaluate("test").to_json()), train(datas["all"], cfg))


def test_given_staleness_without_the_pipeline_when_configured_then_refused(
    datas: dict[str, list[PartyData]],
) -> None:
    with pytest.raises(ConfigError, match="staleness needs the pipelined engine"):
        train(datas["all"], config(staleness=2), pipeline=False)


# ------------------------------------------------------------------------ bounded staleness


class Spy:
    """Records, per party, the order in which its steps run (in process)."""

    def __init__(self, inner: InProcessTransport) -> None:
        self.inner = inner
        self.steps: dict[int, list[tuple[str, int]]] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def train(self, calls: dict[int, TrainCall]) -> Callable[[], dict[int, TrainResult]]:
        for b, c in calls.items():
            seq = self.steps.setdefault(b, [])
            seq += [("backward", s.round_id) for s in c.backward]
            seq += [("fuse", s.round_id) for s in c.fuse]
            seq += [("embed", s.round_id) for s in c.embed]
        return self.inner.train(calls)


@pytest.mark.parametrize("staleness", [1, 3, 8])
def test_given_staleness_when_trained_then_embeddings_miss_at_most_s_updates(
    datas: dict[str, list[PartyData]], staleness: int
) -> None:
    cfg = config(staleness=staleness)
    spies: list[Spy] = []

    def wrap(inner: object) -> Spy:
        spies.append(Spy(inner))  # type: ignore[arg-type]
        return spies[-1]

    parties, records, report = train(datas["all"], cfg, wrap=wrap)
    assert [r.round_id for r in records] == list(range(len(records)))
    assert all(r.updated == r.present for r in records)  # every round's Backward arrived
    worst = 0
    for steps in spies[0].steps.values():
        applied: set[int] = set()
        embedded: list[int] = []
        for phase, round_id in steps:
            if phase == "backward":
                applied.add(round_id)
            elif phase == "embed":
                missing = [r for r in embedded if r not in applied]
                worst = max(worst, len(missing))
                embedded.append(round_id)
    assert 0 < worst <= staleness
    again = train(datas["all"], cfg)
    assert_same(again, (parties, records, report))  # deterministic
    exact = train(datas["all"], config())
    assert not np.array_equal(parties[0].parameters_vector(), exact[0][0].parameters_vector())


# ------------------------------------------------------------------------ over real gRPC


@pytest.mark.parametrize(
    ("staleness", "data", "fresh"),
    [(0, "all", False), (3, "all", False), (3, "label-only", False), (3, "label-only", True)],
)
def test_given_real_grpc_servers_when_pipelined_then_equal_to_in_process(
    datas: dict[str, list[PartyData]], staleness: int, data: str, fresh: bool
) -> None:
    """Two lanes in flight per party over gRPC give the in-process numbers (and, exact, the
    sequential engine's), also when a label-only holder's Fuse lane trails its Embed lane, and
    with --fresh-own-tower (the label party's Fuse lane then steps its own tower)."""
    cfg = config(staleness=staleness, fresh_own_tower=fresh)
    remote = parties_of(datas[data], cfg)
    with party_servers(remote, RUN) as registry:
        transport = GrpcTransport(registry, RUN, Deadlines())
        try:
            got = train(datas[data], cfg, transport=transport, parties=remote)
        finally:
            transport.close()
    assert_same(got, train(datas[data], cfg, pipeline=staleness > 0))


def test_given_hostile_train_requests_when_sent_then_refused_and_nothing_changes(
    datas: dict[str, list[PartyData]],
) -> None:
    cfg = config()
    parties = parties_of(datas["all"][:1], cfg)
    party = parties[0]
    with party_servers(parties, RUN) as registry:
        address = registry.member(0).address  # type: ignore[union-attr]
        with grpc.insecure_channel(address) as channel:
            stub = vfl_pb2_grpc.PartyStub(channel)
            header = convert.header(RUN, party.party_id)
            before = party.parameters_vector()
            embed = vfl_pb2.EmbedRequest(round_id=0, split="train", train=True)
            cases = {
                "empty": vfl_pb2.TrainRequest(header=header),
                "nested header": vfl_pb2.TrainRequest(
                    header=header, embed=[vfl_pb2.EmbedRequest(header=header, round_id=0)]
                ),
                "rounds not increasing": vfl_pb2.TrainRequest(
                    header=header,
                    backward=[
                        vfl_pb2.BackwardRequest(round_id=3),
                        vfl_pb2.BackwardRequest(round_id=2),
                    ],
                ),
                "too many steps": vfl_pb2.TrainRequest(
                    header=header,
                    backward=[vfl_pb2.BackwardRequest(round_id=i) for i in range(300)],
                ),
                "bad embed (no rows, no digest)": vfl_pb2.TrainRequest(
                    header=header, embed=[embed]
                ),
                "evaluation embed": vfl_pb2.TrainRequest(
                    header=header,
                    embed=[vfl_pb2.EmbedRequest(round_id=0, split="test", train=False)],
                ),
                "another party": vfl_pb2.TrainRequest(header=convert.header(RUN, "party9")),
            }
            for name, request in cases.items():
                with pytest.raises(grpc.RpcError) as err:
                    stub.Train(request, timeout=20)
                code = err.value.code()
                assert code in (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.PERMISSION_DENIED,
                    grpc.StatusCode.FAILED_PRECONDITION,
                ), (name, code)
                assert "\n" not in (err.value.details() or "x\n"), name
                np.testing.assert_array_equal(party.parameters_vector(), before, err_msg=name)
                assert party.last_round == -1, name
