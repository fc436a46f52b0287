"""Run a federation: serve, wait for the parties, align, train, evaluate, write results."""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from vfl_coordinator import plane_choice
from vfl_coordinator.admission import admission_for
from vfl_coordinator.checkpoints import Checkpointer, Resume, load_resume, open_rounds
from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.registry import Registry
from vfl_coordinator.servicer import CoordinatorServicer, CoordinatorState
from vfl_coordinator.serving_record import ServingRecord
from vfl_coordinator.transport import GrpcTransport
from vfl_core.auto_rounds import pin_exact
from vfl_core.config import TrainConfig
from vfl_core.errors import ConfigError
from vfl_core.lifecycle import (
    PhaseObserver,
    RunResults,
    interrupted_results,
    run_federation,
)
from vfl_core.persistence.run_log import LineLog
from vfl_core.protocol import RUN_FINISHED
from vfl_core.training.alignment import UnmatchedIds
from vfl_core.training.engine import Federation, Observer, RoundRecord
from vfl_wire.audit import AuditLog
from vfl_wire.channels import freeze_heap, make_server, start_with_health
from vfl_wire.security import (
    COORDINATOR,
    TOKENS_FILE,
    GuardInterceptor,
    Security,
    coordinator_policy,
    load_security,
    load_token_digests,
)
from vfl_wire.v1 import vfl_pb2_grpc

log = logging.getLogger(__name__)

# How long a coordinator whose federation was refused waits for the registered parties to hear
# why: each registers again (a heartbeat) every 2 s (vfl_client.host.HEARTBEAT_S).
TELL_REFUSAL_S = 10.0


def run_coordinator(
    config: CoordinatorConfig,
    *,
    progress: bool = True,
    stop: threading.Event | None = None,
    on_port: Callable[[int], None] | None = None,
) -> dict[str, object]:
    """Run one federation to the end; returns the results also written to `config.out`."""
    config = _exact_where_needed(config)
    resume = load_resume(config)  # a checkpoint of this run: resume it (same run id)
    run_id = resume.run_id if resume is not None else config.run_id or uuid.uuid4().hex[:12]
    registry = Registry(config.clients, resuming=resume is not None)
    state = CoordinatorState(registry, run_id, config.train.model_dump_json())
    state.resume_round = resume.round if resume is not None else -1
    security = load_security(config.tls_dir, config.insecure, COORDINATOR)
    state.admission = admission_for(config.parties, security)
    state.rejoin_timeout_s = config.rejoin_timeout_s  # Evaluate/Predict wait this long at most
    stop = stop or _stop_on_signals(state)
    audit = AuditLog(config.audit_log) if config.audit_log is not None else None
    interceptors = [audit.server_interceptor()] if audit is not None else []
    server = make_server(
        16,
        # the guard first: nothing (the audit included) reads a body it has not admitted
        [_guard(config, security, state.admission.names), *interceptors],
        max_concurrent_rpcs=MAX_CONCURRENT_RPCS,
        max_receive_bytes=MAX_REQUEST_BYTES,
    )
    vfl_pb2_grpc.add_CoordinatorServicer_to_server(CoordinatorServicer(state), server)
    port = start_with_health(server, config.listen, security.server_credentials())
    freeze_heap()
    log.info(
        "coordinator run %s listening on port %d; waiting for %d parties",
        run_id,
        port,
        config.clients,
    )
    if on_port is not None:
        on_port(port)
    transport = None
    ending = "run failed"  # what the parties are told when the run ends

    def connect() -> GrpcTransport:
        return GrpcTransport(
            registry,
            run_id,
            config.deadlines,
            credentials=security.channel_credentials(),
            interceptors=[audit.client_interceptor()] if audit is not None else (),
            wire_dtype=config.train.wire_dtype,
            relay_keys=state.relay_key_list if config.train.encrypt_relay else None,
        )

    try:
        try:
            registry.wait(config.clients, config.quorum, config.register_timeout_s)
        except KeyboardInterrupt:  # the parties gathered so far would wait for this process
            _tell_gathered(registry, connect, "run interrupted")
            raise
        except ConfigError:
            if registry.refusal is None:  # too few parties (a refusal is told by heartbeat)
                _tell_gathered(registry, connect, ending)
            raise
        transport = connect()
        plane = plane_choice.choose(config, registry, transport)  # "auto": probed here
        train = config.train.model_copy(update={"data_plane": plane})
        try:
            results = _train(config, state, transport, progress, resume, train)
        except KeyboardInterrupt:
            ending = "run interrupted"
            raise
        except UnmatchedIds as err:  # every party is told why, and adds its own IDs to it
            ending = str(err)
            raise
        ending = RUN_FINISHED
        if state.federation is not None:  # told with RUN_FINISHED, for the serving bundles
            transport.serving_choice = state.federation.serving_choice()
        if config.serve:
            assert state.federation is not None
            state.record = ServingRecord(Path(config.out), results, state.federation)
            state.phase = "serving"
            log.info("training done; serving predictions until stopped")
            stop.wait()
        state.phase = "done"
        return results
    finally:
        try:
            if registry.refusal is not None and not stop.is_set():
                _tell_refusal(registry)
            if transport is not None:
                told = transport.shutdown(registry.members(), ending)
                if not stop.is_set():  # an operator's signal ends it at once
                    _farewell(registry, transport, told, ending, config.farewell_s)
        finally:
            if transport is not None:
                transport.close()
            server.stop(grace=1.0).wait()
            if audit is not None:
                audit.close()


def _exact_where_needed(config: CoordinatorConfig) -> CoordinatorConfig:
    """`config` with exact rounds pinned where the run needs the relay (injected faults,
    --no-pipeline, ...: plane_choice.relay_only) and the staleness is unset
    (vfl_core.auto_rounds): the parties are told it when they register."""
    train = pin_exact(config.train, plane_choice.relay_only(config))
    return config if train is config.train else config.model_copy(update={"train": train})


def _tell_gathered(registry: Registry, connect: Callable[[], GrpcTransport], ending: str) -> None:
    """The run ended before it started (a signal, too few parties): tell the parties that
    registered so far, which would otherwise wait for this process for their whole
    --register-timeout, its port silent."""
    if not registry.members():
        return
    transport = connect()
    try:
        told = transport.shutdown(registry.members(), ending)
        log.info("block(s) %s told: %s", ", ".join(map(str, sorted(told))) or "none", ending)
    finally:
        transport.close()


def _tell_refusal(registry: Registry) -> None:
    """Stay up until every registered party heard why the federation cannot start (its next
    heartbeat is refused with the cause), so none waits out its --register-timeout."""
    untold = registry.wait_told(TELL_REFUSAL_S)
    if untold:
        log.warning(
            "block(s) %s did not register again within %.0fs to hear the refusal",
            ", ".join(map(str, sorted(untold))),
            TELL_REFUSAL_S,
        )


def _farewell(
    registry: Registry, transport: GrpcTransport, told: set[int], ending: str, seconds: float
) -> None:
    """Tell the parties that missed the end of the run (down, frozen, or restarting just as it
    ended) when they register again within `seconds` (a heartbeat, or a new process): once this
    process is gone, such a client would wait for it for its whole --register-timeout."""
    missed = {b: registry.heard(b) for b in registry.members() if b not in told}
    if not missed or seconds <= 0:
        return
    log.info(
        "block(s) %s did not hear that the run ended; waiting up to %.0fs for them to register "
        "again (--farewell)",
        ", ".join(map(str, missed)),
        seconds,
    )
    deadline = time.monotonic() + seconds
    while missed and (left := deadline - time.monotonic()) > 0:
        registry.wait_heard(missed, left)
        for block, heard in list(missed.items()):
            if not registry.heard_since(block, heard):
                continue
            now = registry.heard(block)
            if transport.shutdown([block], ending):
                log.info("block %d registered again and was told: %s", block, ending)
                del missed[block]
            else:
                missed[block] = now  # wait for its next registration


def _train(
    config: CoordinatorConfig,
    state: CoordinatorState,
    transport: GrpcTransport,
    progress: bool,
    resume: Resume | None = None,
    train: TrainConfig | None = None,
) -> dict[str, object]:
    """The run (vfl_core.lifecycle) over the gRPC transport, with the round log, the
    checkpointer and the phases the servicer reports; results.json, and FederationDown when the
    run failed (after writing it)."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpointer = Checkpointer(config, state, resume) if config.checkpoint_dir else None
    with LineLog(open_rounds(out / "rounds.jsonl", resume), "round log") as rounds_file:
        observers: list[Observer] = [_Progress(state, rounds_file)]
        if checkpointer is not None:
            observers.append(checkpointer)
        try:
            run = _run(config, state, transport, progress, resume, checkpointer, observers, train)
        except KeyboardInterrupt as err:  # SIGINT/SIGTERM in training: keep what was done
            if state.federation is None:
                raise
            log.warning(
                "run %s interrupted by %s: results.json keeps what was done", state.run_id, err
            )
            stopped = interrupted_results(
                state.federation, "coordinator", state.run_id, config, str(err) or "SIGINT"
            )
            if checkpointer is not None:
                stopped = replace(stopped, resumed=checkpointer.history)
            stopped.write(out)
            raise
    if checkpointer is not None:
        run = replace(run, resumed=checkpointer.history)
    results = _conclude(run, out)
    state.phase = "serving" if config.serve else "done"
    return results


def _run(
    config: CoordinatorConfig,
    state: CoordinatorState,
    transport: GrpcTransport,
    progress: bool,
    resume: Resume | None,
    checkpointer: Checkpointer | None,
    observers: list[Observer],
    train: TrainConfig | None = None,
) -> RunResults:
    """The run itself (vfl_core.lifecycle) with the coordinator's settings; `train`: the
    configuration with the data plane chosen (config.train's, unless "auto")."""
    return run_federation(
        transport,
        train or config.train,
        config=config,
        kind="coordinator",
        run_id=state.run_id,
        out=Path(config.out),
        first_epoch=int(resume.engine["epoch"]) if resume is not None else 0,
        eval_every=config.eval_every,
        observers=observers,
        progress=progress,
        faults=config.faults,
        resume=_resumer(checkpointer, resume),
        evaluate_for_s=config.rejoin_timeout_s,
        down_after=config.down_after,
        retry_every=config.retry_every,
        alignment=config.alignment,
        rejoin_timeout_s=config.rejoin_timeout_s,
        pause_probe_s=config.pause_probe_s,
        align_retry_s=config.align_retry_s,
        pipeline=config.pipeline,
        checkpoint_every=config.checkpoint_every if checkpointer is not None else None,
    )


def _conclude(run: RunResults, out: Path) -> dict[str, object]:
    """Write results.json, a failed run's too; then raise what ended a failed run (the
    coordinator exits non-zero)."""
    results = run.write(out)
    if run.failure is not None:
        raise run.failure
    return results


def _resumer(
    checkpointer: Checkpointer | None, resume: Resume | None
) -> Callable[[Federation], None] | None:
    """Continue the aligned engine from the checkpoint, if there is one to resume."""
    if checkpointer is None or resume is None:
        return None
    return lambda fed: checkpointer.resumed(fed, resume)


@dataclass
class _Progress(PhaseObserver):
    """What the servicer reports of the run (its engine, phase and epoch), and rounds.jsonl."""

    state: CoordinatorState
    rounds: LineLog  # a line per round

    def phase_started(self, fed: Federation, phase: str) -> None:
        self.state.federation = fed
        self._interrupted()
        self.state.phase = phase

    def round_done(self, fed: Federation, record: RoundRecord) -> None:
        self.state.epoch = record.epoch
        self.rounds.write(record.to_json())
        self._interrupted()

    def _interrupted(self) -> None:
        """A signal that came in training stops the run here, between rounds."""
        if self.state.interrupt is not None:
            raise KeyboardInterrupt(self.state.interrupt)


# What one peer can make the coordinator hold: requests are small (registrations, prediction
# requests of at most MAX_PREDICT_IDS hashes), so 16 MiB each; 64 calls accepted at once, and
# `max_inflight` of them per peer (vfl_wire.security.GuardInterceptor).
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_CONCURRENT_RPCS = 64


def _guard(config: CoordinatorConfig, security: Security, parties: set[str]) -> GuardInterceptor:
    tokens = None
    if security.identity is not None:
        tokens = load_token_digests(security.identity.directory / TOKENS_FILE)
    return GuardInterceptor(
        secure=security.secure,
        policy=coordinator_policy(dict.fromkeys(parties)) if security.secure else None,
        tokens=tokens,
        max_inflight=config.max_inflight,
        readers=MAX_CONCURRENT_RPCS,
    )


def _stop_on_signals(state: CoordinatorState) -> threading.Event:
    """SIGTERM/SIGINT end the serving phase cleanly and interrupt any other phase."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        stop.set()
        if state.phase == "serving":
            return
        if state.phase == "training" and state.interrupt is None:
            # Raised by _Progress when the current round is done, not here: an exception
            # raised from a signal handler lands wherever the main thread is, inside a gRPC
            # call's bookkeeping too, and such a call left half-made could hang the exit (a
            # SIGINT test hung 1 run in 7 after a Shutdown that got no answer). A second
            # signal stops at once.
            state.interrupt = name
            log.warning("%s: stopping after the current round (again to stop at once)", name)
            return
        raise KeyboardInterrupt(name)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)
    return stop
