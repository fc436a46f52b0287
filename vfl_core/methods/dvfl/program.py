"""The coordinator's schedule of Decoupled VFL (vfl_core.methods.dvfl.nets), driven by the round
engine.

The coordinator holds no weights: it only tells the tiers when to step and relays what goes down
the tiers (guest activations into the hosts' registers, host outputs to the owner). A run has
three stages, each a range of the engine's epochs, so the cursor, checkpoints and logs work as
for every method:

1. `epochs` local epochs. A round takes the next batch of the plan (every sample any party holds,
   labelled or not, once per epoch). Each guest holding the batch takes one autoencoder step on
   its rows of it; every `period`-th round (or every round of every `period_epochs`-th epoch,
   the paper's period) is a communication round, where the guests also
   return their activations and the coordinator writes them into every host's registers. Every
   host then replays `host_steps` batches from its registers. Nothing is sent back to a guest.
2. `owner_epochs` owner epochs. Each starts with the transfer: the hosts are frozen; for
   batches of the training samples the owner holds, each host that has not yet delivered the
   batch returns its code of its registers, and the owner keeps the last code of each host
   (zeros until a host delivers; without faults every host delivers in the first epoch and the
   later transfers call no one). No guest takes part. Then, in one round, the owner trains its
   classifier on what it holds, for the rows it has labels of.

Inference: the guests holding a test batch send their activations (Embed), every host encodes
them (an absent guest is zeros), the owner classifies the hosts' codes (Predict). The owner does
not need to hold the sample; a sample is scored only where a label party holds it.

Faults: a guest that misses its step writes nothing (the hosts keep its last activation, the
paper's buffer); a host that misses its step is not trained and misses the writes; a host that
misses at transfer or inference contributes zeros. Guests and hosts have separate liveness: a
host failure does not stop the guest of the same process.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Container, Iterable
from dataclasses import dataclass, field

import numpy as np

from vfl_core.data.batch_plan import Batch, eval_plan
from vfl_core.data.learning_task import REGRESSION
from vfl_core.methods.combination import combine
from vfl_core.methods.dvfl.messages import (
    GuestCall,
    GuestResult,
    HostCall,
    HostOutputCall,
    OwnerFeedCall,
    OwnerTrainCall,
)
from vfl_core.methods.federation_port import FederationPort
from vfl_core.methods.liveness import UP, Liveness
from vfl_core.methods.outcomes import PredictionBatch, RoundRecord, batch_prediction, well_formed
from vfl_core.methods.spec import active_party
from vfl_core.protocol import PredictCall

log = logging.getLogger(__name__)

LOCAL, OWNER = "local", "owner"
DVFL = "dvfl"  # the method's name in the registry, which its steps travel under
_NO_ROWS = np.zeros(0, dtype=np.int64)


@dataclass
class DvflProgram:
    fed: FederationPort
    # Payload bytes of the float32 tensors relayed, by leg (what the communication period saves).
    bytes_sent: dict[str, int] = field(
        default_factory=lambda: {
            "guests_to_coordinator": 0,
            "coordinator_to_hosts": 0,
            "hosts_to_owner": 0,
        }
    )
    hosts: Liveness = field(init=False)  # the host replicas' own up/down state
    # transfer batch (its first sample) -> hosts whose codes of it the owner holds
    delivered: dict[int, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fed = self.fed
        self.cfg = fed.config.dvfl
        self.hosts = Liveness(sorted(fed.infos), fed.down_after, fed.retry_every, who="host")

    # ------------------------------------------------------------------ schedule
    def stage(self, epoch: int) -> str:
        return LOCAL if epoch < self.fed.config.epochs else OWNER

    @property
    def owner(self) -> int | None:
        return active_party(self.fed.label_blocks)

    def plan(self, epoch: int) -> list[Batch] | None:
        """None in the guests' stage (the engine's plan); the owner's epochs: the transfer
        batches, then one round without samples in which the owner trains."""
        fed, stage = self.fed, self.stage(epoch)
        if stage == LOCAL:
            return None
        owner = self.owner
        if owner is None:
            return []
        train = [Batch((owner,), _NO_ROWS)]  # a round without samples: the owner's epoch
        al = fed.alignments["train"]
        held = np.flatnonzero(al.rows[owner] >= 0)
        return [*eval_plan(al, fed.config.eval_batch_size, held), *train]

    # ------------------------------------------------------------------ training rounds
    def run_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        """One round (the engine has polled the parties that registered again)."""
        if self.stage(epoch) == LOCAL:
            return self._local_round(round_id, epoch, batch)
        if len(batch.index):
            return self._transfer_round(round_id, epoch, batch)
        return self._owner_round(round_id, epoch, batch)

    def _local_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        fed, where = self.fed, f"round {round_id}"
        al = fed.alignments["train"]
        digest = al.digest(batch.index)
        write = self._writes(round_id, epoch)
        guests = [b for b in batch.pattern if fed.liveness.should_call(b, fed.tick)]
        calls = {
            b: GuestCall(round_id, epoch, al.rows_of(b, batch.index), digest, write) for b in guests
        }
        answers = fed.transport.step(DVFL, "GuestStep", calls) if calls else {}
        size = (len(batch.index), self.cfg.guest_dim)
        good = {b: r for b, r in answers.items() if b in calls and _guest_ok(r, write, size)}
        for b in answers.keys() - good.keys():
            log.warning("%s: guest step of block %d refused (loss/shape/NaN)", where, b)
        fed.record(guests, good, "guest step", where)
        writes = {b: r.activations for b, r in good.items() if r.activations is not None}
        self._count("guests_to_coordinator", writes.values())
        updated = self._host_steps(round_id, epoch, batch, writes, where)
        return RoundRecord(
            round_id=round_id,
            epoch=epoch,
            pattern=batch.pattern,
            present=tuple(sorted(good)),
            losses={b: good[b].loss for b in sorted(good)},
            updated=updated,
        )

    def _writes(self, round_id: int, epoch: int) -> bool:
        """Whether the guests write to the hosts in this round: every `period`-th round, or with
        `period_epochs` K every round of every K-th guest epoch (the paper's period)."""
        if self.cfg.period_epochs is not None:
            return (epoch + 1) % self.cfg.period_epochs == 0
        return (round_id + 1) % self.cfg.period == 0

    def _host_steps(
        self,
        round_id: int,
        epoch: int,
        batch: Batch,
        writes: dict[int, np.ndarray],
        where: str,
    ) -> tuple[int, ...]:
        """Every live host writes the round's activations (if any) and replays; returns those
        that answered."""
        fed = self.fed
        samples = len(fed.alignments["train"])
        index = batch.index if writes else _NO_ROWS
        hosts = [h for h in sorted(fed.infos) if self.hosts.should_call(h, fed.tick)]
        calls = {
            h: HostCall(round_id, epoch, samples, index, writes, self.cfg.host_steps) for h in hosts
        }
        for _ in calls:
            self._count("coordinator_to_hosts", writes.values())
        answers = fed.transport.step(DVFL, "HostStep", calls) if calls else {}
        good = {h: r for h, r in answers.items() if h in calls and np.isfinite(r.loss)}
        self._record_hosts(hosts, good, "host step", where)
        for h, r in sorted(good.items()):
            if r.replayed:
                log.debug("%s: host %d replay loss %.5f", where, h, r.loss)
        return tuple(sorted(good))

    def _transfer_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        fed, where, owner = self.fed, f"round {round_id}", self.owner
        assert owner is not None
        al = fed.alignments["train"]
        done = self.delivered.setdefault(int(batch.index[0]), set())
        missing = frozenset(fed.infos) - done
        outputs: dict[int, np.ndarray] = {}
        if missing:
            index = batch.index
            outputs = self._host_outputs(round_id, "train", index, None, where, False, missing)
            self._count("hosts_to_owner", outputs.values())
        # A down owner is fed even nothing when the engine retries it (a pause): a thawed or
        # reconnected owner registers no more, and a transfer that calls nobody would keep
        # training paused until --rejoin-timeout.
        retry = fed.liveness.state.get(owner, UP) != UP
        fed_ok: set[int] = set()
        if (outputs or retry) and fed.liveness.should_call(owner, fed.tick):
            call = OwnerFeedCall(
                round_id, al.rows_of(owner, batch.index), al.digest(batch.index), outputs
            )
            fed_ok = set(fed.transport.step(DVFL, "OwnerFeed", {owner: call}))
            fed.record([owner], fed_ok, "owner feed", where)
            if owner in fed_ok:
                done.update(outputs)
        return RoundRecord(
            round_id, epoch, batch.pattern, tuple(sorted(outputs)), {}, tuple(sorted(fed_ok))
        )

    def _owner_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        fed, owner = self.fed, self.owner
        assert owner is not None
        losses: dict[int, float] = {}
        if fed.liveness.should_call(owner, fed.tick):
            call = OwnerTrainCall(round_id, epoch - fed.config.epochs)
            answers = fed.transport.step(DVFL, "OwnerTrain", {owner: call})
            losses = {b: v for b, v in answers.items() if b == owner and np.isfinite(v)}
            fed.record([owner], losses, "owner train", f"round {round_id}")
        return RoundRecord(round_id, epoch, batch.pattern, tuple(losses), losses, tuple(losses))

    def _host_outputs(
        self,
        request: int,
        split: str,
        index: np.ndarray,
        activations: dict[int, np.ndarray] | None,
        where: str,
        immediate: bool,
        blocks: Collection[int] | None = None,
    ) -> dict[int, np.ndarray]:
        """Each live host's code of the batch: of its registers (`activations` None) or of the
        given guests' activations."""
        fed = self.fed
        hosts = [
            h
            for h in sorted(fed.infos)
            if (blocks is None or h in blocks) and self.hosts.should_call(h, fed.tick)
        ]
        from_registers = activations is None
        call = HostOutputCall(request, split, index, from_registers, activations or {})
        answers = (
            fed.transport.step(DVFL, "HostOutput", dict.fromkeys(hosts, call)) if hosts else {}
        )
        size = (len(index), self.cfg.host_dim)
        good = {h: a for h, a in answers.items() if h in hosts and well_formed(a, size)}
        for h in answers.keys() - good.keys():
            log.warning("%s: output of host %d refused (shape/dtype/NaN)", where, h)
        self._record_hosts(hosts, good, "host output", where, immediate)
        return good

    # ------------------------------------------------------------------ inference
    def predict_batch(
        self, split: str, batch: Batch, request: int, blocks: Collection[int] | None
    ) -> PredictionBatch:
        fed = self.fed
        embeddings, _ = fed.inference_embeddings(split, batch, request, blocks)
        present = tuple(sorted(embeddings))
        regression = fed.task == REGRESSION
        owner, where = self.owner, f"{split} request {request}"
        usable = owner is not None and (blocks is None or owner in blocks)
        if not embeddings or not usable:
            return PredictionBatch(batch.index, batch.pattern, present, {}, None)
        outputs = self._host_outputs(request, split, batch.index, embeddings, where, True, blocks)
        probs: dict[int, np.ndarray] = {}
        if outputs and fed.liveness.should_call(owner, fed.tick):
            call = PredictCall(request, outputs, tuple(sorted(outputs)))
            answers = fed.transport.predict({owner: call})
            size = (len(batch.index), fed.num_classes)
            probs = {b: p for b, p in answers.items() if b == owner and well_formed(p, size)}
            fed.record([owner], probs, "predict", where, immediate=True)
        combined = combine(fed.spec.combination, present, probs, fed.eval_rng(batch), regression)
        return batch_prediction(batch, present, probs, combined, regression)

    # ------------------------------------------------------------------ liveness
    def rejoined(self, block: int) -> None:
        """A party that registered again (or came back from an injected failure) is called
        again at once, as a guest, a host or both, whichever was down.

        A restarted party rolls back to its checkpoint, which may predate transfers the
        coordinator counts as delivered: a restarted owner would otherwise train on codes it no
        longer holds (none, after a guest-stage checkpoint), and a restarted host's codes would
        not be those of the weights it now predicts with. So the next transfer asks again: every
        host for a returning owner, the returning host otherwise (the hosts are frozen, so a
        party that lost nothing gets the same codes again)."""
        if any(self.delivered.values()):
            who = "every host's codes" if block == self.owner else f"host {block}'s codes"
            log.info("block %d is back: the next transfer sends %s again", block, who)
        for done in self.delivered.values():
            if block == self.owner:
                done.clear()
            done.discard(block)
        for liveness in (self.fed.liveness, self.hosts):
            if liveness.state.get(block, UP) != UP:
                liveness.rejoined(block, self.fed.tick)

    def _record_hosts(
        self,
        expected: list[int],
        got: Container[int],
        phase: str,
        where: str,
        immediate: bool = False,
    ) -> None:
        for h in expected:
            if h in got:
                self.hosts.answered(h, self.fed.tick)
            else:
                log.info("%s: host %d missed %s", where, h, phase)
                self.hosts.failed(h, self.fed.tick, phase, immediate)

    def _count(self, leg: str, arrays: Iterable[np.ndarray]) -> None:
        self.bytes_sent[leg] += sum(a.nbytes for a in arrays)

    def state(self) -> dict[str, object]:
        """Plain data for the coordinator's checkpoint (Federation.snapshot)."""
        return {
            "bytes": dict(self.bytes_sent),
            "hosts": self.hosts.to_state(),
            "delivered": {str(k): sorted(v) for k, v in self.delivered.items()},
        }

    def load_state(self, saved: dict) -> None:
        self.bytes_sent.update({k: int(v) for k, v in saved["bytes"].items()})
        self.hosts.load_state(saved["hosts"])
        self.delivered = {int(k): set(v) for k, v in saved["delivered"].items()}

    def stats(self) -> dict[str, object]:
        """What results.json reports of the method."""
        return {"bytes": dict(self.bytes_sent), "host_transitions": self.hosts.counts()}


def _guest_ok(result: GuestResult, write: bool, shape: tuple[int, int]) -> bool:
    if not np.isfinite(result.loss):
        return False
    return well_formed(result.activations, shape) if write else result.activations is None
