"""One run of a federation, whatever the transport: build the round engine, align, resume, train,
evaluate, and the results that results.json is written from.

`vfl simulate` (vfl_core.simulate, the in-process transport) and the coordinator
(vfl_coordinator.runner, the gRPC transport) both call `run_federation`; they differ only in the
transport and the observers they pass (the coordinator's round log, checkpointer and phase
reporting), and in the results.json keys only one of them has (`RunResults.to_json`).

Alignment: the engine's default, keyed ID hashes ("hmac"), is the only default here. The
coordinator passes its configured `alignment` (its config and CLI default to PSI, so parties of
different organisations exchange no ID hashes); a simulation keeps the engine's default, which
every test pinning in-process runs to gRPC runs and every recorded simulation result relies on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypedDict, Unpack

from pydantic import BaseModel

from vfl_core.atomic_files import write_text_atomically
from vfl_core.config import TrainConfig
from vfl_core.inference.federation_view import Ask
from vfl_core.inference.metrics import EvalReport, format_table, unscored_note
from vfl_core.inference.subsets import SubsetResult, evaluate_subsets
from vfl_core.persistence.run_log import RunLog
from vfl_core.protocol import Transport
from vfl_core.training.alignment import check_shared
from vfl_core.training.cut_short import heads_left, no_head_answered
from vfl_core.training.engine import EpochSummary, Federation, Observer, Pause
from vfl_core.training.faults import FaultConfig, FaultyTransport
from vfl_core.training.liveness import FederationDown, Transition
from vfl_core.training.retry import Backoff, retry_until

log = logging.getLogger(__name__)

# A test variant of a simulation: its MCAR p_miss, its mechanism spec ("mnar:0.7"), or None
# (the parties' own test split: every coordinator run, and simulations of prepared dirs).
Variant = float | str | None

# How often an evaluation that scored nothing (no label party answered) is tried again.
EVALUATE_AGAIN_S = 2.0


class EngineOptions(TypedDict, total=False):
    """How the round engine treats its parties (vfl_core.training.engine.Federation keeps the
    defaults)."""

    down_after: int
    retry_every: int
    alignment: str
    rejoin_timeout_s: float | None
    pause_probe_s: float
    align_retry_s: float
    pipeline: bool
    checkpoint_every: int | None


class PhaseObserver(Observer):
    """An observer also told when the run enters a phase (aligning, training, evaluating)."""

    def phase_started(self, fed: Federation, phase: str) -> None:
        """Before `phase` starts."""


@dataclass(frozen=True)
class RunResults:
    """What a run reports; results.json is `to_json()` of it."""

    kind: Literal["coordinator", "simulate"]  # which results.json layout (see to_json)
    run_id: str
    task: str  # which metrics the rows hold (vfl_core.inference.headline)
    config: BaseModel  # the run's own configuration (CoordinatorConfig, SimulationConfig)
    epochs: list[EpochSummary]
    reports: dict[Variant, EvalReport]  # test metrics per test variant (coordinator: None)
    subsets: dict[Variant, list[SubsetResult]]  # test metrics with only these parties
    transitions: list[Transition]
    transition_counts: dict[str, int]
    pauses: list[Pause]  # training waited for a label party
    faults: dict[str, int] | None  # injected faults (None: none injected)
    rounds: int
    method: dict[str, object] | None  # a round program's figures (dvfl: bytes relayed)
    early_stop: dict[str, object] | None = None  # vfl_core.training.early_stop's record, when on
    # what the validation samples chose (vfl_core.inference.choice), when early stopping is on;
    # where nothing was held out, the heads the run predicts with, if not LASER-VFL's
    # (vfl_core.inference.unvalidated): what `vfl export --choice` serves
    choice: dict[str, object] | None = None
    # the label-leak defences applied (vfl_core.privacy) and the embeddings' epsilon, when on
    privacy: dict[str, object] | None = None
    failure: FederationDown | None = None  # what ended the run early
    resumed: list[dict] = field(default_factory=list)  # the coordinator's restarts
    interrupted: str | None = None  # the signal that stopped the run in training (SIGINT, ...)

    @property
    def first(self) -> Variant:
        return next(iter(self.reports), None)

    def to_json(self) -> dict[str, object]:
        """results.json: the same keys for both, the coordinator's with the run's status,
        pauses, restarts and injected faults, a simulation's with every test variant."""
        first = self.first
        test = self.reports[first].to_json() if first in self.reports else None
        common = {
            "task": self.task,
            "config": json.loads(self.config.model_dump_json()),
            "epochs": [e.__dict__ for e in self.epochs],
            "test": test,
            "subsets": [r.to_json() for r in self.subsets.get(first, [])],
            "transitions": [t.__dict__ for t in self.transitions],
            "transition_counts": self.transition_counts,
            **({"privacy": self.privacy} if self.privacy is not None else {}),
        }
        stopped = {"status": "interrupted", "interrupted": self.interrupted}
        if self.kind == "simulate":
            return {
                "run_id": self.run_id,
                **(stopped if self.interrupted else {}),
                **common,
                "rounds": self.rounds,
                "method": self.method,
                "early_stop": self.early_stop,
                "validation_choice": self.choice,
                "variants": variants_json(self.reports, self.subsets),
            }
        error = str(self.failure) if self.failure is not None else None
        return {
            "run_id": self.run_id,
            "status": "failed" if error else "ok",
            **({"error": error} if error else {}),
            **(stopped if self.interrupted else {}),
            **common,
            "pauses": [p.__dict__ for p in self.pauses],
            "resumed": self.resumed,
            "faults": self.faults,
            "rounds": self.rounds,
            "method": self.method,
            "early_stop": self.early_stop,
            "validation_choice": self.choice,
        }

    def write(self, directory: Path) -> dict[str, object]:
        """Write <directory>/results.json; returns what it holds."""
        results = self.to_json()
        write_text_atomically(
            directory / "results.json", json.dumps(results, indent=2, default=str)
        )
        return results


def run_federation(
    transport: Transport,
    train: TrainConfig,
    *,
    config: BaseModel,
    kind: Literal["coordinator", "simulate"],
    run_id: str,
    out: Path | None = None,
    first_epoch: int = 0,
    eval_every: int = 0,
    observers: Sequence[Observer] = (),
    progress: bool = False,
    faults: FaultConfig | None = None,
    resume: Callable[[Federation], None] | None = None,
    tests: Mapping[Variant, Callable[[], None]] | None = None,
    subsets: bool = True,
    evaluate_for_s: float | None = None,
    **options: Unpack[EngineOptions],
) -> RunResults:
    """Align, train and evaluate the parties behind `transport`; never raises FederationDown:
    a run it ends is returned with `failure` set (what it did so far is kept).

    With `out`, config.json and epochs.jsonl (a test evaluation every `eval_every` epochs; a
    resumed run continues from `first_epoch`) are written there. `faults` wraps the transport
    in injected failures, as in every run (a seed gives the same failures in both transports);
    they model rounds lost to failures, so training does not pause for them, and evaluation sees
    every party. `resume(fed)` continues an aligned engine from a checkpoint. `tests`: the test
    variants of a simulation, each installing its test split (else the parties' own, if aligned).
    `evaluate_for_s`: an evaluation that scores no sample is tried again for this long, then the
    run fails (None: once, and unscored is no failure)."""
    faulty = None
    if faults is not None and faults.active:
        faulty = FaultyTransport(transport, faults, train.seed)
        options["rejoin_timeout_s"] = None
    with contextlib.ExitStack() as stack:
        watchers = list(observers)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            watchers.append(stack.enter_context(RunLog(out, first_epoch, eval_every)))
        fed = Federation(
            faulty if faulty is not None else transport,
            train,
            progress=progress,
            observers=watchers,
            **options,
        )
        # the record shows the values the run resolved (TrainConfig.resolved), not "unset"
        if isinstance(getattr(config, "train", None), TrainConfig):
            config = config.model_copy(update={"train": fed.config})
        if out is not None:
            write_text_atomically(out / "config.json", config.model_dump_json(indent=2))
        run = _Run(fed, kind, run_id, config, faulty)
        _phase(fed, "aligning")
        fed.align()
        if "train" in fed.alignments:  # a party that shares nothing is refused, not trained on
            check_shared(fed.alignments["train"], {b: i.party_id for b, i in fed.infos.items()})
        if resume is not None:
            resume(fed)
        _phase(fed, "training")
        try:
            run.epochs = fed.train()
        except FederationDown as err:
            return run.failed(err)
    if faulty is not None:
        faulty.heal()  # faults model training; evaluation sees every party
    _phase(fed, "evaluating")
    fed.align_again_if_due("after training")
    return run.evaluate(tests, subsets, evaluate_for_s)


def interrupted_results(
    fed: Federation,
    kind: Literal["coordinator", "simulate"],
    run_id: str,
    config: BaseModel,
    signal_name: str,
) -> RunResults:
    """The record of a run stopped by a signal in training: the epochs done, the rounds, the
    pauses and transitions so far, no evaluation (results.json "status": "interrupted")."""
    run = _Run(fed, kind, run_id, config, None)
    run.epochs = list(fed.cursor.summaries)
    return replace(run.results(), interrupted=signal_name)


def _phase(fed: Federation, phase: str) -> None:
    for observer in fed.observers:
        if isinstance(observer, PhaseObserver):
            observer.phase_started(fed, phase)


@dataclass
class _Run:
    """A run's figures as they come in."""

    fed: Federation
    kind: Literal["coordinator", "simulate"]
    run_id: str
    config: BaseModel
    faulty: FaultyTransport | None
    epochs: list[EpochSummary] = field(default_factory=list)
    reports: dict[Variant, EvalReport] = field(default_factory=dict)
    subsets: dict[Variant, list[SubsetResult]] = field(default_factory=dict)

    def evaluate(
        self,
        tests: Mapping[Variant, Callable[[], None]] | None,
        subsets: bool,
        evaluate_for_s: float | None,
    ) -> RunResults:
        """Evaluate every test variant (and with `subsets`, every observed set of parties)."""
        if tests is None:  # the parties' own test split, aligned with the rest
            tests = {None: lambda: None} if "test" in self.fed.alignments else {}
            align = False
        else:
            align = True
        for variant, install in tests.items():
            install()
            if align:
                self.fed.align(("test",))
            report = self.reports[variant] = evaluate_test(self.fed, evaluate_for_s)
            if evaluate_for_s is not None and not report.scored:
                return self.failed(
                    FederationDown(
                        f"the test evaluation scored no sample ({report.unscored} unscored): no "
                        f"label party answered within {evaluate_for_s:g}s"
                    )
                )
            if evaluate_for_s is not None and heads_left(self.fed, report):
                total = report.scored + report.unscored
                return self.failed(
                    FederationDown(
                        f"the test evaluation scored {report.scored} of {total} samples: every "
                        "label party stopped answering during it, and none answered a whole "
                        f"evaluation within {evaluate_for_s:g}s (results.json keeps the partial "
                        "table)"
                    )
                )
            if subsets:
                self.subsets[variant] = evaluate_subsets(self.fed, "test")
        return self.results()

    def failed(self, err: FederationDown) -> RunResults:
        log.error("run %s failed: %s", self.run_id, err)
        if not self.epochs:
            self.epochs = list(self.fed.cursor.summaries)
        return self.results(err)

    def results(self, failure: FederationDown | None = None) -> RunResults:
        fed = self.fed
        return RunResults(
            kind=self.kind,
            run_id=self.run_id,
            task=fed.task,
            config=self.config,
            epochs=self.epochs,
            reports=self.reports,
            subsets=self.subsets,
            transitions=list(fed.liveness.transitions),
            transition_counts=fed.liveness.counts(),
            pauses=list(fed.pauses),
            faults=self.faulty.counts() if self.faulty is not None else None,
            rounds=fed.round_id,
            method=fed.method_stats(),
            early_stop=None if fed.early_stop is None else fed.early_stop.to_json(),
            choice=fed.choice.to_json() if fed.early_stop is not None or fed.choice.heads else None,
            privacy=privacy_record(fed),
            failure=failure,
        )


def privacy_record(fed: Federation) -> dict[str, object] | None:
    """The run's label-leak defences and, with noised embeddings, their (epsilon, delta): every
    training round counted as a release by every party (a party embeds only the rounds whose
    batch it holds: an upper bound), each of a batch over the fewest training rows any party
    holds (the largest sampling rate: an upper bound too)."""
    config = fed.config.privacy
    if not config.active:
        return None
    out: dict[str, object] = config.model_dump()
    train = fed.alignments.get("train")
    if config.embedding_clip is not None and train is not None and train.rows:
        fewest = min(int((rows >= 0).sum()) for rows in train.rows.values())
        rate = min(1.0, fed.train_rows.batch_size() / max(1, fewest))
        from vfl_core.privacy.defences import epsilon  # the module's defences need torch

        eps = epsilon(config.embedding_noise, rate, fed.round_id, config.delta)
        out |= {"embedding_epsilon": eps, "sample_rate": rate, "releases": fed.round_id}
    return out


def evaluate_test(fed: Federation, evaluate_for_s: float | None) -> EvalReport:
    """The test metrics with the parties live now. While the evaluation scores no sample (every
    label party down, e.g. killed as training ended) or is cut short, it is tried again every
    EVALUATE_AGAIN_S for up to `evaluate_for_s` (None: not again)."""
    report = evaluate_waiting(fed, "test", evaluate_for_s, "the test evaluation")
    title = "test metrics"
    if heads_left(fed, report):
        total = report.scored + report.unscored
        title += (
            f" (PARTIAL: {report.scored} of {total} samples scored before every label party "
            "stopped answering)"
        )
    table = [format_table(report.rows()), unscored_note(report.unscored)]
    log.info("%s\n%s", title, "\n".join(filter(None, table)))
    _say_who_was_missing(fed, report)
    return report


def evaluate_waiting(
    fed: Federation, split: str, wait_s: float | None, what: str = "an evaluation"
) -> EvalReport:
    """`fed.evaluate(split)`, tried again every EVALUATE_AGAIN_S for up to `wait_s` seconds
    (None: not again) while no label party answered or every one went away during it (as
    training pauses for them); a party back in the meantime is aligned again and called. Without
    a whole evaluation by then, the one that scored most (said by `heads_left` or its nothing
    scored: the caller decides what that means)."""
    give_up = time.monotonic() + (wait_s or 0.0)
    tries: list[EvalReport] = []

    def attempt() -> EvalReport:
        if tries:
            fed.align_again_if_due("evaluating again")  # parties back since: called again
        tries.append(fed.evaluate_many([Ask(split)])[0])  # (batches without a label party too)
        return tries[-1]

    def failed(r: EvalReport) -> bool:
        return no_head_answered(fed, r) or heads_left(fed, r)

    report = retry_until(
        attempt,
        failed,
        give_up if wait_s is not None else float("-inf"),
        Backoff(EVALUATE_AGAIN_S),
        lambda r, pause: log.warning(
            "%s scored %d of %d samples (%s): trying again in %.0fs, for at most %.0fs more",
            what,
            r.scored,
            r.scored + r.unscored,
            "no label party answered"
            if not r.scored
            else "every label party stopped answering during it",
            pause,
            give_up - time.monotonic(),
        ),
    )
    if failed(report):  # none was whole: keep the one that scored most, said to be partial
        report = max(tries, key=lambda r: r.scored)
    return report


def missing_blocks(
    fed: Federation, split: str, live: Sequence[int], never_called: Set[int] = frozenset()
) -> list[int]:
    """Registered blocks that hold samples of `split` (aligned or not: one that did not answer
    the last alignment counts) but did not answer throughout; a block the validation choice left
    out of every batch (`never_called`) is not missing."""
    held = sorted(b for b, info in fed.infos.items() if info.samples.get(split, 0) > 0)
    return [b for b in held if b not in set(live) and b not in never_called]


def _say_who_was_missing(fed: Federation, report: EvalReport) -> None:
    """A test table scored without some parties (down as training ended) is that of the parties
    that answered: said, so that nobody reads it as the whole federation's."""
    live = report.live_blocks()
    missing = missing_blocks(fed, "test", live, report.chosen_out - set(report.answers))
    if missing and report.scored:
        log.warning(
            "the test evaluation ran without block(s) %s (down, or not answering every batch): "
            "its figures are those of block(s) %s alone, not the whole federation's "
            "(results.json: live_blocks)",
            ", ".join(map(str, missing)),
            ", ".join(map(str, sorted(live))) or "none",
        )


def variants_json(
    reports: Mapping[Variant, EvalReport], subsets: Mapping[Variant, list[SubsetResult]]
) -> list[dict[str, object]]:
    """Each test variant: its name, its metrics and (when computed) its subsets."""
    out = []
    for variant, report in reports.items():
        row = {**variant_json(variant), **report.to_json()}
        if variant in subsets:
            row["subsets"] = [r.to_json() for r in subsets[variant]]
        out.append(row)
    return out


def variant_json(variant: Variant) -> dict[str, object]:
    """How results.json names a test variant: its p_miss, or its mechanism."""
    if isinstance(variant, str):
        return {"p_miss_test": None, "missing_test": variant}
    return {"p_miss_test": variant}
