"""The evaluations after training on the direct data plane (vfl_core/training/direct_eval.py)
in one process: the choice of subsets and threshold (each candidate's evaluation, the
federation's scores) and the test evaluation with the chosen subsets go over Round calls scored
by the label party, with the relay's numbers, bit for bit. Binary digits (a threshold to
choose) in three blocks, labels at block 0 only, parties 1 and 2 missing samples; subsets
chosen strictly on validation ("best"), so that the test evaluation leaves parties out.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from test_direct_plane import WAIT_S, MemoryLinks, ThreadedDirect

from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.inference.subsets import evaluate_subsets
from vfl_core.protocol import EmbedCall, RoundCall, RoundResult
from vfl_core.training.direct_eval_party import run_call
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

K = 3


class ThreadedCalls(ThreadedDirect):
    """ThreadedDirect whose parties serve every Round call as vfl_client does (run_call: a
    training round, or an evaluation); counts the relay's Embed fan-outs too."""

    def __init__(self, parties: dict[int, Party]) -> None:
        super().__init__(parties)
        self.embeds: list[dict[int, EmbedCall]] = []

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        self.embeds.append(calls)
        return super().embed(calls)

    def direct(self, calls: dict[int, RoundCall]) -> Callable[[], dict[int, RoundResult]]:
        self.calls.append(calls)
        waited = {
            b: replace(c, embed_wait_s=WAIT_S, grad_wait_s=2 * WAIT_S) for b, c in calls.items()
        }
        futures = {
            b: self.workers[b].submit(run_call, self.parties[b], c, MemoryLinks(b, self))
            for b, c in waited.items()
        }
        return lambda: {b: f.result() for b, f in futures.items()}


def _parties(base: Path, train: TrainConfig) -> dict[int, Party]:
    digits = load_dataset("digits")
    binary = dataclasses.replace(digits, y=(digits.y >= 5).astype(np.int64), num_classes=2)
    misses = [0.0, 0.3, 0.3]
    paths = prepare_parties(binary, base, K, misses, misses, 0.2, seed=0, label_blocks=[0])
    data = [load_party_dir(path) for path in paths]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}


def _run(parties: dict[int, Party], transport) -> tuple[list[RoundRecord], Federation]:
    records: list[RoundRecord] = []
    train = next(iter(parties.values())).config
    fed = Federation(transport, train, progress=False, on_round=records.append)
    fed.align()
    fed.train()
    return records, fed


def _json(value: object) -> object:
    return json.loads(json.dumps(value, default=str))


def test_given_the_direct_plane_when_choosing_and_testing_then_the_relays_numbers(
    tmp_path: Path,
) -> None:
    train = TrainConfig(
        seed=0, epochs=3, data_plane="direct", early_stop_patience=2, subset_choice="best"
    )
    relay = _parties(tmp_path / "a", train)
    want_records, want = _run(relay, InProcessTransport(relay))
    direct = _parties(tmp_path / "b", train)
    transport = ThreadedCalls(direct)
    got_records, got = _run(direct, transport)
    want_test, got_test = want.evaluate("test"), got.evaluate("test")

    assert [r.to_json() for r in got_records] == [r.to_json() for r in want_records]
    assert want.choice.threshold is not None  # a binary task: a threshold was chosen
    assert want.choice.subsets  # and subsets: the test evaluation leaves parties out
    assert _json(got.choice.to_json()) == _json(want.choice.to_json())
    assert _json(got_test.to_json()) == _json(want_test.to_json())
    assert got_test.chosen_out  # parties the choice left out of the test batches
    for block, party in relay.items():
        np.testing.assert_array_equal(direct[block].parameters_vector(), party.parameters_vector())
    evaluations = [c[0].evaluation for c in transport.calls if 0 in c and c[0].evaluation]
    after = [e for e in evaluations if e.split == "train"][len(want.early_stop.history) :]
    # after training, two fan-outs on the validation samples: every candidate of every observed
    # set together (those without the label party embed-only: unscored, as on the relay), then
    # the validation with the choice (the federation's scores: the threshold's)
    assert len(after) == 2, len(after)
    assert not after[0].federation_scores and after[-1].federation_scores
    candidates = [c for p in want.choice.to_json()["candidates"] for c in p["scores"]]
    scored = [c for c in candidates if 0 in c["blocks"]]
    assert len({b.head for b in after[0].batches}) == 1
    assert len(after[0].batches) >= len(scored) > 1
    fan_out = next(c for c in transport.calls if 0 in c and c[0].evaluation is after[0])
    assert any(b.embed_only for c in fan_out.values() for b in c.evaluation.batches)
    assert all(not b.embed_only for b in after[0].batches)  # the scorer's: none embed-only
    assert not [c for c in transport.embeds if any(e.split == "train" for e in c.values())]
    assert sum(e.split == "test" for e in evaluations) == 1

    # the test split with every observed set of parties: one fan-out, the relay's numbers
    calls, embeds = len(transport.calls), len(transport.embeds)
    want_sets, got_sets = evaluate_subsets(want, "test"), evaluate_subsets(got, "test")
    assert [r.to_json() for r in got_sets] == [r.to_json() for r in want_sets]
    assert len(transport.calls) - calls == 1
    assert len(transport.embeds) == embeds  # nothing through the relay
