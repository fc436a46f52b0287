"""The online prediction endpoint's logic, at the label party (the gateway), transport-free.

A request names sample IDs (and may carry the gateway's own block's features inline). The
gateway keys the IDs with the federation secret, asks every other serving party for their
embeddings at once (each call carries the request's deadline), embeds its own rows meanwhile,
and at the deadline (or as soon as every party answered) predicts each ID with its head from the
blocks whose embeddings arrived: LASER-VFL's head on the mean of any subset is the predictor
trained for exactly that subset, so a party that is slow, down or lacks the ID shrinks the set
instead of failing the request. Each answer names the parties used and why each other one is
missing (vfl_core.serving.peers: timed out, down, does not hold the ID).

A party found lagging (vfl_core.serving.lag: it missed its last LAGGING_AFTER deadlines in a
row, or that many requests wait for it past half their deadlines with no answer from it since)
is probed by one request at a time and waited for by none: requests are answered when the
others have, and the party's first answer within a deadline makes the gateway wait for it again.

Why the label party and not the coordinator: the heads are the label party's, so a request
crosses each link once (gateway -> party -> gateway, in parallel); through the coordinator it
would cross twice in sequence (coordinator -> parties, then coordinator -> label party), and the
coordinator would need to hold or reach the models. The coordinator is not involved at all.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

import numpy as np

from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import ConfigError, DataError
from vfl_core.serving.admission import SLOW_PEER, Admission, Overloaded
from vfl_core.serving.bundle import Bundle
from vfl_core.serving.combine import Combiner
from vfl_core.serving.features import FeatureSource, inline_features
from vfl_core.serving.lag import LAGGING_AFTER, Lag
from vfl_core.serving.peer_state import PeerStates
from vfl_core.serving.peers import (
    LAGGING,
    NOT_HELD,
    TIMED_OUT,
    PeerAnswer,
    PeerFailure,
    PeerPort,
)
from vfl_core.training.alignment import hash_ids

log = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 0.1  # 100 ms: two WAN round trips of 50 ms, or many on one site
MAX_DEADLINE_S = 10.0
DEFAULT_MAX_IDS = 256  # IDs in one request
MAX_ID_CHARS = 256
# Why a party that answered is not used: the validation split chose to predict this observed
# set without it (vfl_core.inference.choice; the bundle's subsets), as the federation does.
LEFT_OUT = "left out by the validation choice for this set of parties"


@dataclass(frozen=True)
class OnlinePrediction:
    """The answer for one ID."""

    id: str
    used: tuple[str, ...]  # parties whose embeddings the prediction is from
    missing: dict[str, str]  # party -> why its embedding is not used
    probabilities: tuple[float, ...] | None = None  # classification, per class
    predicted_class: int | None = None
    label: str | None = None  # the predicted class as the training table wrote it
    value: float | None = None  # regression, in original units
    error: str | None = None  # no prediction: why

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "parties": list(self.used)}
        out["missing"] = dict(self.missing)
        for key in ("probabilities", "predicted_class", "label", "value", "error"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass
class _Blocks:
    """Which keys each block answered for, and their embeddings."""

    held: dict[int, np.ndarray] = field(default_factory=dict)  # block -> (n,) bool
    rows: dict[int, np.ndarray] = field(default_factory=dict)  # block -> (n,) row in embeddings
    embeddings: dict[int, np.ndarray] = field(default_factory=dict)  # block -> (held, d)
    missing: dict[int, str] = field(default_factory=dict)  # block -> why it gave no answer

    def add(self, block: int, answer: PeerAnswer) -> None:
        self.held[block] = answer.held
        self.rows[block] = np.cumsum(answer.held) - 1
        self.embeddings[block] = answer.embeddings


class Gateway:
    """The label party's endpoint: its bundle, its feature table and the other parties."""

    def __init__(
        self,
        bundle: Bundle,
        features: FeatureSource | None,
        peers: Sequence[PeerPort],
        secret: bytes,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        max_ids: int = DEFAULT_MAX_IDS,
        admission: Admission | None = None,
    ) -> None:
        if bundle.head is None:
            raise DataError(
                f"the gateway's bundle (party {bundle.meta.party_id}) has no head: a label "
                "party's bundle serves predictions"
            )
        self.bundle = bundle
        self.features = features
        self.peers = list(peers)
        self.secret = secret
        self.deadline_s = check_deadline(deadline_s)
        self.max_ids = max_ids
        self.names = {bundle.meta.block: bundle.meta.party_id} | {p.block: p.name for p in peers}
        self._lag = Lag()
        self.peer_states = PeerStates({p.block: p.name for p in peers})
        self.admission = admission or Admission()
        # the own embedding and the heads run once for all concurrent requests (combine.py)
        self.embedder: Combiner[np.ndarray, np.ndarray] = Combiner(self._embed_all)
        self.heads: Combiner[tuple[list[str], _Blocks], list[OnlinePrediction]] = Combiner(
            self._answer_all
        )

    def predict(
        self,
        ids: Sequence[str],
        deadline_s: float | None = None,
        inline: Mapping[str, Mapping[str, object]] | None = None,
        arrived: float | None = None,
        phases: dict[str, float] | None = None,
        not_after: float | None = None,
    ) -> list[OnlinePrediction]:
        """One prediction per ID from the parties that answered before the deadline (default:
        the gateway's), counted from `arrived` (time.monotonic() when the request reached the
        gateway; default now). `inline`: ID -> the gateway's own features of it (column ->
        cell), used instead of its table. A malformed request is a DataError (nothing is
        asked). A request whose deadline cannot be met (spent queued, or less left than a whole
        answer takes now: vfl_core.serving.admission) is Overloaded, asking no party; so is one
        that a party it waited for did not answer in time while that party answered others
        since (alive, only slow: SLOW_PEER). `not_after`: the caller's own deadline
        (time.monotonic()), used when earlier than the one counted from `arrived`; an answer
        ready past it by more than the admission's stamp grace is Overloaded (LATE).
        `phases`, when given, gets the seconds spent in each step: own (the own block's
        embedding), parties (waiting for them), heads; and `overrun` when answered past the
        deadline."""
        ids = self._checked_ids(ids)
        seconds = self.deadline_s if deadline_s is None else check_deadline(deadline_s)
        start = time.monotonic()
        own_deadline = (start if arrived is None else arrived) + seconds
        deadline = own_deadline if not_after is None else min(own_deadline, not_after)
        own = self._own_rows(ids, inline or {})  # checked before any party is asked
        self.admission.admit(start, deadline)
        keys = hash_ids(ids, self.secret)
        awaited = {p.block for p in self.peers if not self._lag.lagging(p.block)}
        callees = [p for p in self.peers if self._lag.ask(p.block, deadline)]
        asked = {p.block: p.embed(keys, deadline) for p in callees}
        for block, future in asked.items():  # in parallel
            self._lag.watch(block, future, deadline)
            self.peer_states.watch(block, future)
        midpoint = (time.monotonic() + deadline) / 2
        blocks = _Blocks()
        try:
            blocks.add(self.bundle.meta.block, self._own_answer(keys, own))
        except ConfigError as err:  # its --lookup function failed: the others still answer
            log.warning("the gateway's own rows: %s", err)
            blocks.missing[self.bundle.meta.block] = f"refused: {err}"
        embedded = time.monotonic()
        waiting = {b: f for b, f in asked.items() if b in awaited}
        self._lag.wait(waiting, midpoint, deadline)
        waited = time.monotonic()
        if waiting and all(f.done() and f.exception() is None for f in waiting.values()):
            self.admission.record(waited - start)  # a whole answer's time
        for block in {p.block for p in self.peers} - set(asked):  # lagging, its probe is out
            blocks.missing[block] = self.peer_states.why_missing(block, lagging=True)
        for block, future in asked.items():
            timed_out = _collect(blocks, block, future)
            if timed_out:  # named by what is known of the party (peer_state.py)
                lagging = block not in awaited or self._lag.lagging(block)
                blocks.missing[block] = self.peer_states.why_missing(block, lagging)
            # only a request that waited the deadline out counts a miss: one that did not
            # wait (or stopped when the party was found lagging) says nothing of the party
            if block in awaited and timed_out and time.monotonic() >= deadline:
                self._lag.missed(block)
        self._shed_if_slow(blocks, start, seconds)
        answers = self.heads.run((ids, blocks))
        done = time.monotonic()
        if done > deadline and phases is not None:
            phases["overrun"] = done - deadline
        self.admission.check_late(done, own_deadline, not_after)
        if phases is not None:
            phases.update(own=embedded - start, parties=waited - embedded, heads=done - waited)
        return answers

    def _shed_if_slow(self, blocks: _Blocks, asked_at: float, seconds: float) -> None:
        """Overloaded (SLOW_PEER) when a party gave this request no answer (timed out, or
        lagging) although it is alive: it answered some request within the last
        LAGGING_AFTER deadlines (`seconds` each) before this request asked, or since. The
        parties of a loaded 2-core machine were measured silent for more than one deadline of
        100 ms while alive, and a live party timed out with no answer to anyone while this
        request waited (the machine stalled) was once left out as "timed out".
        Such a party is only late (the machine or the queues under load), and an answer
        without it would be a weaker prediction for no fault of the party. A party that
        answered nothing for that long (frozen) or is down is left out, with its reason: so a
        party that freezes costs the requests of its first LAGGING_AFTER deadlines a 429."""
        since = asked_at - LAGGING_AFTER * seconds
        slow = [
            self.names[b]
            for b, why in sorted(blocks.missing.items())
            if why in (TIMED_OUT, LAGGING) and b in self.peer_states.names()
            and self.peer_states.answered_since(b, since)
        ]  # fmt: skip
        if slow:
            window = f"{1000 * LAGGING_AFTER * seconds:.0f} ms"
            raise Overloaded(SLOW_PEER, f"{', '.join(slow)} answered within the last {window}")

    def warm_up(self, timeout_s: float) -> None:
        """Before the gateway is ready: run its own model and head once (torch's first calls
        are slow: measured 185 ms for the first request), and ask every peer once for a key
        no one holds, waiting at most `timeout_s`, so that their connections are set up and
        their states known. An error of the own model or head propagates."""
        meta = self.bundle.meta
        own = self.bundle.embed(np.zeros((1, *meta.feature_shape), dtype=np.float32))  # (1, d)
        self.bundle.predict({meta.block: own})
        self.bundle.predict({meta.block: own} | {p.block: np.zeros_like(own) for p in self.peers})
        keys = hash_ids(["vfl-warm-up: held by no one"], self.secret)
        deadline = time.monotonic() + timeout_s
        asked = {p.block: p.embed(keys, deadline) for p in self.peers}
        for block, future in asked.items():
            self.peer_states.watch(block, future)
        wait(list(asked.values()), timeout=timeout_s)

    def peer_health(self) -> dict[str, dict[str, object]]:
        """Each other party's state now (readiness body, metrics): name -> its description."""
        return {
            p.name: self.peer_states.describe(p.block, self._lag.lagging(p.block))
            for p in self.peers
        }

    # ----------------------------------------------------------------- the request
    def _checked_ids(self, ids: Sequence[str]) -> list[str]:
        if isinstance(ids, str) or not isinstance(ids, Sequence) or not ids:
            raise DataError("ids: give a non-empty list of sample IDs")
        if len(ids) > self.max_ids:
            raise DataError(f"ids: {len(ids)} IDs in one request, at most {self.max_ids}")
        for i in ids:
            if not isinstance(i, str) or not i or len(i) > MAX_ID_CHARS:
                raise DataError(f"ids: each ID is a string of 1 to {MAX_ID_CHARS} characters")
        return list(ids)

    def _own_rows(
        self, ids: list[str], inline: Mapping[str, Mapping[str, object]]
    ) -> dict[int, np.ndarray]:
        """Index in `ids` -> (1, width) features given inline (checked now)."""
        unknown = sorted(set(inline) - set(ids))
        if unknown:
            raise DataError(f"features: given for IDs not in the request: {unknown[:5]}")
        pre = self.bundle.preprocessing
        if inline and pre is None:
            raise DataError("features: this party's block is not a table; no inline features")
        assert pre is not None or not inline
        return {
            ids.index(i): inline_features(pre, cells, f"features of {i!r}")
            for i, cells in inline.items()
        }

    def _own_answer(self, keys: list[bytes], inline: dict[int, np.ndarray]) -> PeerAnswer:
        if self.features is not None:
            held, x = self.features.lookup(keys)
        else:
            held = np.zeros(len(keys), dtype=bool)
            x = np.zeros((0, *self.bundle.meta.feature_shape), dtype=np.float32)
        if inline:  # inline rows replace or add to the table's
            rows = {int(i): x[k] for k, i in enumerate(np.flatnonzero(held))} | {
                i: v[0] for i, v in inline.items()
            }
            held = np.array([i in rows for i in range(len(keys))], dtype=bool)
            x = np.stack([rows[i] for i in sorted(rows)]).astype(np.float32)
        if not len(x):
            return PeerAnswer(held, np.zeros((0, self.bundle.meta.embed_dim), dtype=np.float32))
        return PeerAnswer(held, self.embedder.run(x))

    def _embed_all(self, rows: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The own block's embeddings of each request's rows, in one call of the model."""
        if len(rows) == 1:
            return [self.bundle.embed(rows[0])]
        embeddings = self.bundle.embed(np.concatenate(rows))  # (sum of rows, d)
        return np.split(embeddings, np.cumsum([len(x) for x in rows[:-1]]))

    def _answer_all(
        self, requests: Sequence[tuple[list[str], _Blocks]]
    ) -> list[list[OnlinePrediction]]:
        """Each request's answers, the head run once per set of blocks over all requests."""
        if len(requests) == 1:
            ids, blocks = requests[0]
            return [self._answers(ids, blocks, [blocks.missing], np.zeros(len(ids), np.int64))]
        ids, merged, owner = _merge(requests)
        flat = self._answers(ids, merged, [b.missing for _, b in requests], owner)
        ends = np.cumsum([len(i) for i, _ in requests])
        return [flat[end - len(i) : end] for (i, _), end in zip(requests, ends, strict=True)]

    # ----------------------------------------------------------------- the answer
    def _answers(
        self, ids: list[str], blocks: _Blocks, why: list[dict[int, str]], owner: np.ndarray
    ) -> list[OnlinePrediction]:
        """One answer per ID; the head runs once per set of blocks that answered. `why`: each
        request's reasons for the blocks that gave no answer; `owner`: (n,) each ID's request."""
        order = sorted(blocks.held)
        held = np.zeros((len(ids), len(order)), dtype=bool)  # (n, blocks): none answered
        for column, b in enumerate(order):
            held[:, column] = blocks.held[b]
        sets: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, row in enumerate(held.tolist()):
            sets[tuple(b for b, h in zip(order, row, strict=True) if h)].append(i)
        out: list[OnlinePrediction | None] = [None] * len(ids)
        for present, index in sets.items():
            kept = self.bundle.kept(present)  # the validation choice: as `vfl predict` decides
            missing = _Missing(self.names, blocks, present, why, set(present) - set(kept))
            answers = self._predict_set(
                ids, index, kept, blocks, [missing(owner[i]) for i in index], present
            )
            for i, answer in zip(index, answers, strict=True):
                out[i] = answer
        return [a for a in out if a is not None]

    def _predict_set(
        self,
        ids: list[str],
        index: list[int],
        present: tuple[int, ...],
        blocks: _Blocks,
        missing: list[dict[str, str]],
        observed: tuple[int, ...],
    ) -> list[OnlinePrediction]:
        used = tuple(self.names[b] for b in present)
        if not self.bundle.can_predict(present):
            why = "no party whose embedding the head can predict from holds the ID"
            return [
                OnlinePrediction(ids[i], used, m, error=why)
                for i, m in zip(index, missing, strict=True)
            ]
        rows = np.array(index)
        embeddings = {b: blocks.embeddings[b][blocks.rows[b][rows]] for b in present}  # (m, d)
        # (m, C) or (m, 1), by the head the validation chose for the observed set
        output = self.bundle.predict(embeddings, self.bundle.head_for(observed))
        if self.bundle.meta.task == REGRESSION:
            return [
                OnlinePrediction(ids[i], used, m, value=v[0])
                for i, m, v in zip(index, missing, output.tolist(), strict=True)
            ]
        classes = self.bundle.decide(output).tolist()
        return [
            OnlinePrediction(ids[i], used, m, tuple(probs), k, self.bundle.label(k))
            for i, m, probs, k in zip(index, missing, output.tolist(), classes, strict=True)
        ]


class _Missing:
    """Why each block is missing from one set's answers, per request (memoised: many IDs)."""

    def __init__(
        self,
        names: Mapping[int, str],
        blocks: _Blocks,
        present: tuple[int, ...],
        why: list[dict[int, str]],
        left_out: set[int] | None = None,
    ) -> None:
        self._names = names
        self._absent = {names[b]: NOT_HELD for b in blocks.held if b not in present}
        self._absent |= {names[b]: LEFT_OUT for b in sorted(left_out or ())}
        self._why = why
        self._seen: dict[int, dict[str, str]] = {}

    def __call__(self, request: int) -> dict[str, str]:
        """A fresh dict per ID (answers do not share one)."""
        request = int(request)
        if request not in self._seen:
            given = {self._names[b]: w for b, w in self._why[request].items()}
            self._seen[request] = self._absent | given  # a reason wins over NOT_HELD
        return dict(self._seen[request])


def _merge(requests: Sequence[tuple[list[str], _Blocks]]) -> tuple[list[str], _Blocks, np.ndarray]:
    """Concurrent requests as one: their IDs in order, each block's answers concatenated (a
    block that gave one request no answer holds none of its IDs there), and (n,) which
    request each ID is of."""
    ids = [i for r, _ in requests for i in r]
    merged = _Blocks()
    for b in sorted({b for _, blocks in requests for b in blocks.held}):
        held = [bl.held.get(b, np.zeros(len(r), dtype=bool)) for r, bl in requests]
        merged.held[b] = np.concatenate(held)
        merged.rows[b] = np.cumsum(merged.held[b]) - 1
        merged.embeddings[b] = np.concatenate(
            [bl.embeddings[b] for _, bl in requests if b in bl.held]
        )
    owner = np.repeat(np.arange(len(requests)), [len(r) for r, _ in requests])
    return ids, merged, owner


def _collect(blocks: _Blocks, block: int, future: Future[PeerAnswer]) -> bool:
    """Add the party's answer, or why it gave none; True when it gave none in time."""
    if not future.done():
        blocks.missing[block] = TIMED_OUT
        return True
    err = future.exception()
    if err is None:
        blocks.add(block, future.result())
    elif isinstance(err, PeerFailure):
        blocks.missing[block] = err.reason
        return err.reason == TIMED_OUT
    else:
        log.warning("party of block %d failed to answer: %s", block, err)
        blocks.missing[block] = f"error: {err}"
    return False


def check_deadline(seconds: float) -> float:
    if not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_DEADLINE_S:
        raise DataError(f"deadline: {seconds!r} s; give more than 0 and at most {MAX_DEADLINE_S} s")
    return float(seconds)
