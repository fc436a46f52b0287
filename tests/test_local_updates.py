"""Local updates on cached tensors (TrainConfig.local_steps, vfl_core.methods.laser.local_steps):
off by default and then absent; deterministic in the seed; each local step of a feature party is
the cosine-weighted cached gradient on the same batch; a label party samples each local step's
tasks from (seed, round, local step, block); the cache never outlives its round; the sequential
and the pipelined engines agree; the weights lie in [0, 1]."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import resume_after_crash

from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.methods.laser import local_steps
from vfl_core.methods.laser.local_steps import cosine_weights
from vfl_core.seeding import Stream
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLIENTS = 3


def digits_parties(
    base: Path, train: TrainConfig, p_miss: float = 0.2, keep_labels: bool = False
) -> dict[int, Party]:
    """Digits in three blocks, labels at party 0 only (as the table workloads have them);
    `keep_labels`: it also keeps the labels of rows whose block it misses (labels-only rows)."""
    misses = [p_miss] * CLIENTS
    paths = prepare_parties(
        load_digits_dataset(),
        base,
        CLIENTS,
        misses,
        misses,
        0.2,
        seed=0,
        label_blocks=[0],
        keep_labels=keep_labels,
    )
    data = [load_party_dir(path) for path in paths]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}


def _train(
    base: Path, train: TrainConfig, pipeline: bool = True, keep_labels: bool = False
) -> dict[int, Party]:
    parties = digits_parties(base, train, keep_labels=keep_labels)
    fed = Federation(InProcessTransport(parties), train, progress=False, pipeline=pipeline)
    fed.align()
    fed.train()
    return parties


def _weights(parties: dict[int, Party]) -> np.ndarray:
    return np.concatenate([parties[b].parameters_vector() for b in sorted(parties)])


def _config(**kw: object) -> TrainConfig:
    return TrainConfig(epochs=1, batch_size=256, seed=5, **kw)  # type: ignore[arg-type]


def test_given_defaults_then_no_local_steps_and_no_cache(tmp_path: Path) -> None:
    train = _config()
    assert train.local_steps == 0
    parties = digits_parties(tmp_path, train)
    fed = Federation(InProcessTransport(parties), train, progress=False, pipeline=False)
    fed.align()
    batch = fed.plan(0)[0]
    fed.run_round(0, 0, batch)
    for party in parties.values():
        assert all(state.local is None for state in party.laser.rounds.values())


@pytest.mark.parametrize("keep_labels", [False, True], ids=["overlap", "labels-only-rows"])
def test_given_local_steps_when_trained_twice_then_bit_identical_and_not_the_exact_run(
    tmp_path: Path, keep_labels: bool
) -> None:
    first = _weights(_train(tmp_path / "a", _config(local_steps=2), keep_labels=keep_labels))
    again = _weights(_train(tmp_path / "b", _config(local_steps=2), keep_labels=keep_labels))
    exact = _weights(_train(tmp_path / "c", _config(), keep_labels=keep_labels))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, exact)


@pytest.mark.parametrize("method", ["svfl", "combinatorial", "stale", "local"])
def test_given_a_baseline_then_it_takes_local_steps_too(tmp_path: Path, method: str) -> None:
    """The baselines share LASER-VFL's party steps: concatenating heads (svfl), one slot per
    subset (combinatorial), remembered embeddings of absent blocks (stale), no shared ones
    (local) all take local steps."""
    exact = _weights(_train(tmp_path / "a", _config(method=method), keep_labels=True))
    local = _weights(
        _train(tmp_path / "b", _config(method=method, local_steps=1), keep_labels=True)
    )
    assert np.isfinite(local).all() and not np.array_equal(exact, local)


def test_given_local_steps_when_pipelined_then_as_the_sequential_engine(tmp_path: Path) -> None:
    train = _config(local_steps=2)
    sequential = _weights(_train(tmp_path / "a", train, pipeline=False))
    pipelined = _weights(_train(tmp_path / "b", train, pipeline=True))
    np.testing.assert_array_equal(sequential, pipelined)


@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_given_a_feature_party_then_each_local_step_is_the_weighted_cached_gradient_on_its_batch(
    tmp_path: Path, scale: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay one round of a feature-only party by hand: the exact step with the summed gradient,
    then R steps that re-run f_k on the same rows and apply that gradient, each row weighted by
    max(0, cos(fresh, sent)), at LOCAL_LR_SCALE of the exact step's rate; its weights and
    optimiser end where the party's do."""
    monkeypatch.setattr(local_steps, "LOCAL_LR_SCALE", scale)
    steps = 3
    train = _config(local_steps=steps)
    parties = digits_parties(tmp_path, train)
    fed = Federation(InProcessTransport(parties), train, progress=False, pipeline=False)
    fed.align()
    party = parties[1]  # feature-only (labels at party 0)
    assert not party.data.meta.has_labels
    batch = next(b for b in fed.plan(0) if {0, 1} <= set(b.pattern))
    model, opt = copy.deepcopy((party.f, party.f_opt))
    seen: dict[str, object] = {}
    backward = party.backward

    def spy(call):  # the call's gradient and the cache the round left, before the party steps
        state = party.laser.rounds[call.round_id]
        seen["grad"], seen["rows"] = call.grad.copy(), state.rows.copy()
        seen["x"], seen["sent"] = state.local.x.clone(), state.local.sent.clone()
        backward(call)
        seen["after"] = state.local

    party.backward = spy  # type: ignore[method-assign]
    fed.run_round(0, 0, batch)
    assert seen["after"] is None  # the cache went with its round
    x = party.batch("train", seen["rows"], fed.alignments["train"].digest(batch.index))
    assert torch.equal(x, seen["x"])  # the round's own rows
    grad = torch.from_numpy(seen["grad"])
    model.train()
    sent = model(x)
    torch.testing.assert_close(sent.detach(), seen["sent"], rtol=0, atol=0)
    opt.zero_grad()
    sent.backward(grad)
    opt.step()
    rate = opt.param_groups[0]["lr"]
    for group in opt.param_groups:
        group["lr"] = rate * scale
    for _ in range(steps):
        fresh = model(x)
        weights = cosine_weights(fresh, seen["sent"])
        opt.zero_grad()
        (weights[:, None] * grad * fresh).sum().backward()
        opt.step()
    for got, want in zip(party.f.parameters(), model.parameters(), strict=True):
        assert torch.equal(got, want)


def test_given_a_label_party_then_its_local_steps_sample_tasks_per_round_and_step(
    tmp_path: Path,
) -> None:
    steps = 2
    train = _config(local_steps=steps)
    parties = digits_parties(tmp_path, train)
    label = parties[0]
    drawn: list[tuple[int, ...]] = []
    stream = label.stream

    def spy(which: Stream, *parts: int) -> np.random.Generator:
        if which == Stream.LOCAL_TASKS:
            drawn.append(parts)
        return stream(which, *parts)

    label.stream = spy  # type: ignore[method-assign]
    fed = Federation(InProcessTransport(parties), train, progress=False, pipeline=False)
    fed.align()
    labelled = [b for b in fed.plan(0) if 0 in b.pattern and len(b.pattern) > 1][:3]
    for round_id, batch in enumerate(labelled):
        fed.run_round(round_id, 0, batch)
    assert drawn == [(r, s) for r in range(3) for s in range(1, steps + 1)]
    assert not any(state.local is not None for state in label.laser.rounds.values())


def test_given_a_labels_only_round_then_the_label_party_steps_its_heads_at_fuse(
    tmp_path: Path,
) -> None:
    """A batch whose labels party 0 holds without its features: no Backward reaches it, so its
    local steps (heads only, on the others' embeddings) run once its Fuse is done."""
    steps = 2
    train = _config(local_steps=steps)
    parties = digits_parties(tmp_path, train, keep_labels=True)
    label = parties[0]
    fed = Federation(InProcessTransport(parties), train, progress=False, pipeline=False)
    fed.align()
    batch = next(b for b in fed.plan(0) if b.label_only == (0,) and len(b.pattern) > 1)
    head = [p.detach().clone() for p in label.g.parameters()]
    drawn: list[tuple[int, ...]] = []
    stream = label.stream

    def spy(which: Stream, *parts: int) -> np.random.Generator:
        if which == Stream.LOCAL_TASKS:
            drawn.append(parts)
        return stream(which, *parts)

    label.stream = spy  # type: ignore[method-assign]
    record = fed.run_round(0, 0, batch)
    assert 0 in record.losses and 0 not in record.present  # it fused, embedded nothing
    assert drawn == [(0, s) for s in range(1, steps + 1)]
    assert label.laser.rounds[0].local is None
    assert any(not torch.equal(a, b) for a, b in zip(head, label.g.parameters(), strict=True))


def test_given_local_steps_when_resumed_from_a_checkpoint_then_as_the_run_that_never_stopped(
    tmp_path: Path,
) -> None:
    """Each round's local steps end within the round: a checkpoint between rounds holds them,
    and a run resumed from it is bit-identical to the one that never crashed."""
    train = TrainConfig(epochs=3, batch_size=256, seed=5, local_steps=2)
    parties = digits_parties(tmp_path, train)
    data = [parties[b].data for b in sorted(parties)]
    resume_after_crash(data, train, crash_at=9, secret=b"s")


def test_cosine_weights_lie_in_zero_one() -> None:
    gen = torch.Generator().manual_seed(0)
    cached = torch.randn(64, 8, generator=gen)
    fresh = cached + 0.8 * torch.randn(64, 8, generator=gen)
    fresh[0], fresh[1] = -cached[0], cached[1]  # opposite: 0; unmoved: 1
    cached[2] = fresh[2] = 0.0  # a row of zeros that stayed zeros: unmoved
    fresh[3] = 0.0  # collapsed to zeros: no direction left
    weights = cosine_weights(fresh, cached)
    assert weights.shape == (64,)
    assert bool(((weights >= 0) & (weights <= 1)).all())
    assert weights[0] == 0 and weights[1] == 1 and weights[2] == 1 and weights[3] == 0
    assert 0 < float(weights[4:].mean()) < 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"staleness": 3}, "exact rounds"),
        ({"method": "dvfl"}, "steps of its own"),
    ],
)
def test_given_local_steps_with_what_they_do_not_fit_then_refused(
    options: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(local_steps=2, **options)
