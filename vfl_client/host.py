"""Keep a joined party in its run: heartbeats, resynchronisation and periodic checkpoints.

Behaviour (issue 5):
- **Heartbeat.** The client registers again every HEARTBEAT_S seconds. While the coordinator is
  unreachable it retries with exponential backoff and jitter (0.2 s doubling to HEARTBEAT_S) and
  gives up after `register_timeout_s` without an answer.
- **Sessions.** Every coordinator process has a session name, sent in each registration reply
  with the round of its last checkpoint (R). A client whose last-seen session differs (its first
  heartbeat after starting, or any heartbeat after the coordinator restarted) rolls its party
  back to its own newest checkpoint of a round <= R (initial weights if none), deletes its
  checkpoints of later rounds (an abandoned future), and registers again quoting the session.
  Only then does the coordinator call it, so every party resumes from the same round.
  Without --checkpoint-dir the weights are kept and only rounds after R are accepted.
- **Fencing.** Every registration quotes the lease of this process's first one; when another
  process of the same party registers since, the coordinator refuses this one (ABORTED) and it
  stops with one line, without serving or saving anything more.
- **Refusals.** A checkpoint of another run or configuration stops the client with a one-line
  error (it is never loaded and never deleted); so does a coordinator that now runs another run
  or configuration.
- **Checkpoints.** The coordinator's Checkpoint call saves <dir>/<party id>-round-<r>.pt
  atomically, keeping the newest two (vfl_core.persistence.checkpoint_store).
- **Early stopping's best epoch.** The state a party keeps in memory at a best validation epoch
  is also written to <dir>/<party id>-best.pt, with its round and the coordinator's session. A
  restarted or rolled-back party keeps it again if the coordinator's run still has that round
  (same coordinator process, or a round <= R), so it can go back to it at the end of the run;
  before, a party restarted after the best epoch ended the run on its last weights.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import torch

from vfl_client.servicer import PartyServicer
from vfl_core.config import TrainConfig
from vfl_core.errors import ConfigError, DataError
from vfl_core.methods.laser import fresh_own
from vfl_core.model.eager_optim import EagerAdam
from vfl_core.persistence.checkpoint_store import RoundCheckpoints
from vfl_core.protocol import PartyInfo, Registration
from vfl_core.training.party import Party
from vfl_core.training.retry import reconnect_backoff
from vfl_wire import convert
from vfl_wire.v1 import vfl_pb2_grpc

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
REGISTER_TIMEOUT_S = 5.0  # per heartbeat call
_TRANSIENT = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)


class PartyHost:
    def __init__(
        self,
        servicer: PartyServicer,
        info: PartyInfo,
        address: str,
        run_id: str,
        connect: Callable[[], grpc.Channel],
        *,
        secret: str,
        checkpoint_dir: Path | None,
        unreachable_timeout_s: float,
        lease: str = "",
    ) -> None:
        self.servicer = servicer
        self.info = info
        self.address = address
        self.run_id = run_id
        self.secret = secret
        self.unreachable_timeout_s = unreachable_timeout_s
        self.session = ""  # the coordinator session the party's state is synchronised with
        self.lease = lease  # this process's registration (vfl_coordinator.registry: fencing)
        self.store = None
        if checkpoint_dir is not None:
            self.store = RoundCheckpoints(checkpoint_dir, info.party_id)
            self.store.clean_temporaries()
            servicer.on_checkpoint = self.save
            servicer.on_keep = self.save_best
        self._connect = connect
        self._backoff = reconnect_backoff(HEARTBEAT_S)  # while the coordinator is unreachable
        self._lost_since: float | None = None

    @property
    def party(self) -> Party:
        party = self.servicer.party
        assert party is not None, "PartyHost needs a party attached to the servicer"
        return party

    # ------------------------------------------------------------------ heartbeat loop
    def serve(self, stop: threading.Event) -> str:
        """Heartbeat until the coordinator says Shutdown, `stop` is set or the coordinator stays
        unreachable; returns why serving ended."""
        with self._connect() as channel:
            stub = vfl_pb2_grpc.CoordinatorStub(channel)
            self._backoff.reset()
            self._lost_since = None
            delay: float | None = 0.0
            while delay is not None and not self._wait(stop, delay):
                delay = self._beat(stub)
            if delay is None:
                lost = time.monotonic() - (self._lost_since or time.monotonic())
                return f"coordinator unreachable for {lost:.0f}s"
        if self.servicer.shutdown.is_set():
            return self.servicer.shutdown_reason or "shut down by the coordinator"
        return "stopped by a signal"

    def _beat(self, stub: vfl_pb2_grpc.CoordinatorStub) -> float | None:
        """One heartbeat; the seconds until the next, None to give up."""
        try:
            reply = self._register(stub)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.ABORTED:
                # Another process of this party registered since: it holds the block now. This
                # one must not act or save (its state is older than the other's).
                self.servicer.detach()
                raise ConfigError(f"fenced off by the coordinator: {err.details()}") from None
            if err.code() not in _TRANSIENT:
                raise ConfigError(f"coordinator refused registration: {err.details()}") from None
            now = time.monotonic()
            if self._lost_since is None:  # said once: a party waiting in silence looks hung
                log.warning(
                    "coordinator unreachable (%s): waiting up to %.0fs (--register-timeout) for "
                    "it to come back, then exiting",
                    err.code().name,
                    self.unreachable_timeout_s,
                )
            self._lost_since = self._lost_since or now
            if now - self._lost_since > self.unreachable_timeout_s:
                return None
            return self._backoff.next()
        if self._lost_since is not None:
            log.info("coordinator reachable again")
        self._backoff.reset()
        self._lost_since = None
        return 0.0 if self._follow(reply) else HEARTBEAT_S

    def _wait(self, stop: threading.Event, seconds: float) -> bool:
        """Sleep up to `seconds`; True as soon as serving should end."""
        end = time.monotonic() + seconds
        while not (stop.is_set() or self.servicer.shutdown.is_set()):
            left = end - time.monotonic()
            if left <= 0:
                return False
            stop.wait(min(left, 0.2))
        return True

    def _register(self, stub: vfl_pb2_grpc.CoordinatorStub) -> Registration:
        header = convert.header(self.run_id, self.info.party_id)
        party = self.servicer.party
        request = convert.register_request_to_proto(
            self.info,
            self.address,
            header,
            self.session,
            self.lease,
            party.last_round if party is not None else None,
            self.servicer.relay.key_message if self.servicer.relay is not None else None,
        )
        reply = convert.registration_from_proto(stub.Register(request, timeout=REGISTER_TIMEOUT_S))
        self.lease = reply.lease or self.lease
        return reply

    def _follow(self, reply: Registration) -> bool:
        """Act on a registration reply; True if the party must register again at once."""
        self._check_same_run(reply)
        if reply.session == self.session:
            return False
        after = f"round {reply.resume_round}" if reply.resume_round >= 0 else "no checkpoint"
        log.info("coordinator session %s resumes from %s: synchronising", reply.session, after)
        self.resync(reply.resume_round, reply.session)
        self.session = reply.session
        return True

    def _check_same_run(self, reply: Registration) -> None:
        if reply.run_id != self.run_id:
            raise ConfigError(
                f"the coordinator now runs run {reply.run_id!r}, not run {self.run_id!r}: "
                "start this client again to join it"
            )
        if json.loads(reply.config_json) != json.loads(self.party.told.model_dump_json()):
            raise ConfigError(f"the coordinator of run {self.run_id!r} changed its configuration")

    # ------------------------------------------------------------------ state
    def resync(self, resume_round: int, session: str = "") -> None:
        """Roll the party back to its newest checkpoint of a round <= `resume_round` of the
        coordinator process `session`."""
        party = self.party
        if self.store is None:
            if session != self.session:  # another coordinator process: maybe rolled back
                party.forget_snapshot_after(resume_round)
            if party.last_round > resume_round:
                log.warning(
                    "no --checkpoint-dir: keeping weights of round %d, resuming after round %d",
                    party.last_round,
                    resume_round,
                )
                state = party.state_dict()
                party.load_state_dict({**state, "last_round": resume_round})
            return
        config_json = party.config.model_dump_json()
        # what the party records from the calls may differ from a new process's copy
        self.store.loose = fresh_own.learned(party.told)
        try:
            saved = self.store.latest(self.run_id, config_json, at_most=resume_round)
            best = self.store.best(self.run_id, config_json)
        except ConfigError:
            self.servicer.detach()  # nor is the untrained party saved over anything at exit
            raise
        self.store.discard_after(resume_round)
        secret = self.secret.encode()
        fresh = Party(
            party.party_id,
            party.data,
            party.told,
            secret=secret,
            device=party.device,
            tower_seed=party.tower_seed,
        )
        # what the federation's calls said (fresh_own.record), as the party or its checkpoint has it
        said = (
            party.config if saved is None else TrainConfig.model_validate_json(saved["config_json"])
        )
        fresh_own.record(fresh, said.fresh_own_tower)
        if saved is None:
            log.info("no checkpoint at or before round %d: initial weights", resume_round)
        else:
            fresh.load_state_dict(saved["state"])
            log.info(
                "party %s restored its checkpoint of round %d (last trained round %d)",
                party.party_id,
                saved["meta"]["round"],
                fresh.last_round,
            )
        if best is not None:
            self._reload_best(fresh, best, resume_round, session)
        self.servicer.attach(fresh, self.run_id)

    def _reload_best(self, party: Party, best: dict, resume_round: int, session: str) -> None:
        """Keep early stopping's best-epoch copy read from disk (`best`) again if the
        coordinator's run still has that round: the copy was kept under the same coordinator
        process, or its round is at most the one the coordinator resumes from. A copy of a
        round that a restarted coordinator rolled back past belongs to an abandoned future:
        deleted."""
        assert self.store is not None
        round_id = int(best["meta"]["round"])
        if best["meta"].get("session") == session or round_id <= resume_round:
            party.keep_snapshot(round_id, best["state"])
            log.info(
                "party %s kept its best epoch's state again (round %d)", party.party_id, round_id
            )
        else:
            log.info("discarding the best epoch's state of round %d (rolled back)", round_id)
            self.store.best_path().unlink(missing_ok=True)

    def save_best(self, party: Party, round_id: int) -> None:
        """The coordinator's Checkpoint call of kind keep (under the servicer's lock): the copy
        in memory is kept already; a failed write only loses it for a later restart."""
        assert self.store is not None
        meta = {**self._meta(party), "session": self.session}
        try:
            state = party.kept_state(round_id) or party.state_dict()
            self.store.save_best(round_id, state, party.config.model_dump_json(), meta)
        except DataError as err:
            log.warning("early stopping's best epoch is kept in memory only: %s", err)

    def save(self, party: Party, round_id: int) -> bool:
        """The coordinator's Checkpoint call (runs under the servicer's lock)."""
        assert self.store is not None
        self.store.save(
            round_id, party.state_dict(), party.config.model_dump_json(), self._meta(party)
        )
        return True

    def _meta(self, party: Party) -> dict:
        return {
            "party_id": party.party_id,
            "block": party.block,
            "last_round": party.last_round,
            "run_id": self.run_id,
        }


def warm_up() -> None:
    """Pay torch's lazy first-use costs of an optimiser before the client listens and
    registers, so that a restarted client that has registered builds its party and rejoins at
    once (torch's own optimisers imported torch._dynamo there: seconds on a loaded machine;
    vfl_core.model.eager_optim's do not)."""
    weight = torch.zeros(1, requires_grad=True)
    optimiser = EagerAdam([weight])
    weight.sum().backward()
    optimiser.step()
