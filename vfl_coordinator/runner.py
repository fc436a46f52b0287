"""Run a federation: serve, wait for the parties, align, train, evaluate, write results."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from vfl_coordinator.admission import admission_for
from vfl_coordinator.checkpoints import Checkpointer, Resume, load_resume, open_rounds
from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.registry import Registry
from vfl_coordinator.servicer import CoordinatorServicer, CoordinatorState
from vfl_coordinator.transport import GrpcTransport
from vfl_core.engine import EpochSummary, Federation, RoundRecord
from vfl_core.faults import FaultyTransport
from vfl_core.liveness import FederationDown
from vfl_core.metrics import EvalReport, format_table, unscored_note
from vfl_core.retry import Backoff, retry_until
from vfl_core.run_log import RunLog
from vfl_core.subsets import SubsetResult, evaluate_subsets
from vfl_wire.audit import AuditLog
from vfl_wire.channels import bind, make_server
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


def run_coordinator(
    config: CoordinatorConfig,
    *,
    progress: bool = True,
    stop: threading.Event | None = None,
    on_port: Callable[[int], None] | None = None,
) -> dict[str, object]:
    """Run one federation to the end; returns the results also written to `config.out`."""
    resume = load_resume(config)  # a checkpoint of this run: resume it (same run id)
    run_id = resume.run_id if resume is not None else config.run_id or uuid.uuid4().hex[:12]
    registry = Registry(config.clients)
    state = CoordinatorState(registry, run_id, config.train.model_dump_json())
    state.resume_round = resume.round if resume is not None else -1
    security = load_security(config.tls_dir, config.insecure, COORDINATOR)
    state.admission = admission_for(config.parties, security)
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
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = bind(server, config.listen, security.server_credentials())
    server.start()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
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
    try:
        registry.wait(config.clients, config.quorum, config.register_timeout_s)
        transport = GrpcTransport(
            registry,
            run_id,
            config.train.model.embed_dim,
            config.deadlines,
            credentials=security.channel_credentials(),
            interceptors=[audit.client_interceptor()] if audit is not None else (),
            wire_dtype=config.train.wire_dtype,
        )
        results = _train(config, state, transport, progress, resume)
        ending = "run finished"
        if config.serve:
            state.phase = "serving"
            log.info("training done; serving predictions until stopped")
            stop.wait()
        state.phase = "done"
        return results
    finally:
        if transport is not None:
            transport.shutdown_all(ending)
            transport.close()
        server.stop(grace=1.0).wait()
        if audit is not None:
            audit.close()


def _train(
    config: CoordinatorConfig,
    state: CoordinatorState,
    grpc_transport: GrpcTransport,
    progress: bool,
    resume: Resume | None = None,
) -> dict[str, object]:
    # Injected faults wrap the real transport exactly as `vfl simulate` wraps the in-process one,
    # so a seed gives the same failures in both. A restarted coordinator starts them afresh.
    faulty = None
    if config.faults.active:
        faulty = FaultyTransport(grpc_transport, config.faults, config.train.seed)
    transport = faulty if faulty is not None else grpc_transport
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(config.model_dump_json(indent=2))
    first_epoch = int(resume.engine["epoch"]) if resume is not None else 0
    with (
        open_rounds(out / "rounds.jsonl", resume) as rounds_file,  # a line per round
        RunLog(out, first_epoch, config.eval_every) as run_log,  # a line per epoch
    ):

        def on_round(record: RoundRecord) -> None:
            state.epoch = record.epoch
            rounds_file.write(json.dumps(record.to_json()) + "\n")

        fed = Federation(
            transport,
            config.train,
            progress=progress,
            on_round=on_round,
            down_after=config.down_after,
            retry_every=config.retry_every,
            alignment=config.alignment,
            # injected faults model rounds lost to failures, as in `vfl simulate`: no pause
            rejoin_timeout_s=None if faulty is not None else config.rejoin_timeout_s,
            align_retry_s=config.align_retry_s,
            pipeline=config.pipeline,
        )
        checkpointer = Checkpointer(config, state, resume) if config.checkpoint_dir else None
        if checkpointer is not None:
            checkpointer.attach(fed)
        run_log.attach(fed)
        state.federation = fed
        state.phase = "aligning"
        fed.align()
        if checkpointer is not None and resume is not None:
            checkpointer.resumed(fed, resume)
        state.phase = "training"
        run = _Outcome(config, state, fed, checkpointer, faulty)
        try:
            run.epochs = fed.train()
        except FederationDown as err:
            run.fail(err)
    if faulty is not None:
        faulty.heal()  # faults model training; evaluation sees every party, as in simulations
    state.phase = "evaluating"
    _evaluate(run)
    results = run.write()
    state.phase = "serving" if config.serve else "done"
    return results


# How often an evaluation that scored nothing (no label party answered) is tried again.
EVALUATE_AGAIN_S = 2.0


def _evaluate(run: _Outcome) -> None:
    """The test metrics with the parties live now, and with only each set of them. While the
    evaluation scores no sample (every label party down, e.g. killed as training ended), it is
    tried again every few seconds for up to rejoin_timeout_s; if it never does, that is no
    result: the run failed."""
    fed = run.fed
    if "test" not in fed.alignments:
        return
    give_up = time.monotonic() + run.config.rejoin_timeout_s
    report = retry_until(
        lambda: fed.evaluate("test"),
        lambda r: not r.scored and not _heads_answered(fed, r),
        give_up,
        Backoff(EVALUATE_AGAIN_S),
        lambda _, pause: log.warning(
            "the test evaluation scored no sample (no label party answered): trying again in "
            "%.0fs, for at most %.0fs more",
            pause,
            give_up - time.monotonic(),
        ),
    )
    run.report = report
    table = [format_table(report.rows()), unscored_note(report.unscored)]
    log.info("test metrics\n%s", "\n".join(filter(None, table)))
    if not report.scored:
        run.fail(
            FederationDown(
                f"the test evaluation scored no sample ({report.unscored} unscored): no label "
                f"party answered within {run.config.rejoin_timeout_s:g}s"
            )
        )
    run.subsets = evaluate_subsets(fed, "test")


def _heads_answered(fed: Federation, report: EvalReport) -> bool:
    """Whether a label party answered a batch of the evaluation (then waiting changes nothing)."""
    return any(report.answers.get(b, [0, 0])[1] for b in fed.label_blocks)


@dataclass
class _Outcome:
    """What results.json says about a run: its figures, and "failed" with the error that ended
    it (then the coordinator exits non-zero)."""

    config: CoordinatorConfig
    state: CoordinatorState
    fed: Federation
    checkpointer: Checkpointer | None
    faulty: FaultyTransport | None
    epochs: list[EpochSummary] = field(default_factory=list)
    report: EvalReport | None = None
    subsets: list[SubsetResult] = field(default_factory=list)

    def fail(self, err: FederationDown) -> NoReturn:
        """Write the run as failed (what it did so far is kept), then raise `err`."""
        if not self.epochs:
            self.epochs = list(self.fed.cursor.summaries)
        self.write(error=str(err))
        log.error("run %s failed: %s", self.state.run_id, err)
        raise err

    def write(self, error: str | None = None) -> dict[str, object]:
        fed = self.fed
        results = {
            "run_id": self.state.run_id,
            "status": "failed" if error else "ok",
            **({"error": error} if error else {}),
            "task": fed.task,  # which metrics the rows hold (vfl_core.headline)
            "config": json.loads(self.config.model_dump_json()),
            "epochs": [e.__dict__ for e in self.epochs],
            "test": self.report.to_json() if self.report is not None else None,
            "subsets": [r.to_json() for r in self.subsets],  # test metrics with only these parties
            "transitions": [t.__dict__ for t in fed.liveness.transitions],
            "transition_counts": fed.liveness.counts(),
            "pauses": [p.__dict__ for p in fed.pauses],  # training waited for a label party
            "resumed": self.checkpointer.history if self.checkpointer is not None else [],
            "faults": self.faulty.counts() if self.faulty is not None else None,
            "rounds": fed.round_id,
            "method": fed.method_stats(),  # a round program's figures (dvfl: bytes relayed)
        }
        out = Path(self.config.out)
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
        return results


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
        stop.set()
        if state.phase != "serving":
            raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)
    return stop
