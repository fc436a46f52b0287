"""Early stopping with the epoch end off the critical path (TrainConfig.overlap_validation).

Without it, every epoch ends with its validation and, at a best epoch, the parties' keep of
their state (vfl_core.training.validation.Validator.stop_early): on the direct data plane about
2.5 round trips during which no round trains, at every epoch's end. With it, epoch e's
validation is scored while epoch e + 1 trains, and the early-stopping verdict on epoch e is
taken after e + 1 (one epoch late):

- training stops after epoch e + 1 when the epochs up to e say so (the patience ran out at e);
  epoch e + 1, trained on speculation, is then neither scored nor kept: the run ends on the
  best epoch, the validation record and the model it ends on without the option, after at
  most one epoch more of training;
- the best epoch's weights are kept exactly: on the direct plane, epoch e's validation call
  (vfl_core.training.direct_eval.start) has every party hold a copy of its state before it
  embeds (`Party.hold_snapshot`), and the parties run epoch e + 1's rounds only after taking it
  (RoundCall.after_validation); when epoch e turns out best, the next validation call has them
  keep that copy (`Party.keep_held`, written to disk as a keep call's), no round trip of its
  own. The verdict and the keep of the last epochs (the run stops, or ran all its epochs) are
  taken at once, as without the option.

Where the validation is not one the direct plane takes (in process, through the relay, several
label parties) it is scored at the epoch's end as without the option, the best epoch kept at
once, and only the verdict waits an epoch: the same records and weights as the direct plane's,
bit for bit (tests/test_direct_grpc.py). Under failures, who missed the validation of epoch e is
registered in the liveness after epoch e + 1 (its request ids are epoch e's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vfl_core.methods.liveness import DOWN
from vfl_core.training import direct_eval

if TYPE_CHECKING:
    from vfl_core.inference.metrics import EvalReport
    from vfl_core.training.ports import ValidatorRun

# Validator.observe: an epoch's report into the record, its state kept at a best epoch (now, or
# by the blocks named, which hold a copy of it); True at a best epoch
Observe = Callable[[int, "EvalReport", int, "list[int] | None"], bool]


@dataclass
class _Pending:
    """Epoch `epoch`'s validation, in flight on the direct plane while the next epoch trains."""

    epoch: int
    last_round: int
    started: direct_eval.Started


@dataclass
class _Begun:
    """Epoch `epoch`'s end as far as it was taken (`LateValidation.begin`)."""

    epoch: int
    stopping: bool
    started: direct_eval.Started | None


class LateValidation:
    """Validator.stop_early with the verdict one epoch late."""

    def __init__(self, fed: ValidatorRun, observe: Observe) -> None:
        self.fed = fed
        self.observe = observe
        self.pending: _Pending | None = None
        # a best epoch's round and the blocks holding a copy of it, kept with the next call
        self.keep: tuple[int, tuple[int, ...]] | None = None
        self.begun: _Begun | None = None  # an epoch's end taken early (`begin`)

    def stop_early(self) -> bool:
        """After epoch e: the verdict on epoch e - 1 (its validation back); True (stop) when the
        epochs up to e - 1 say so: epoch e, trained meanwhile, is then neither scored nor kept,
        so the run ends on the model it ends on without the option."""
        fed, stop = self.fed, self.fed.early_stop
        assert stop is not None and fed.train_rows.validation is not None
        epoch, last_round = fed.cursor.epoch - 1, fed.round_id - 1
        begun, self.begun = self.begun, None
        if begun is None or begun.epoch != epoch:
            begun = self._begin(epoch, last_round, None)
        if begun.started is not None:  # on the direct plane while epoch e + 1 trains
            return False
        self._keep_now()
        if begun.stopping:  # epoch e was trained on speculation: not scored, its weights discarded
            stop.stopped_epoch = epoch
            return True
        # scored now: in process, through the relay, or the last epoch
        report = fed.evaluate("train", index=fed.train_rows.validation)
        self.observe(epoch, report, last_round, None)
        return False

    def begin(
        self, epoch: int, last_round: int, turns: direct_eval.Turns
    ) -> direct_eval.Started | None:
        """Epoch `epoch`'s end taken before its last rounds are back (the next epoch sent
        ahead, vfl_core.training.direct_stale): the verdict on the epoch before, and, where the
        run goes on, this epoch's validation sent with `turns`; the validation started (its
        calls out on the direct plane) or None (the run stops, or the validation is scored at
        the epoch's end: nothing was sent). `stop_early` after the epoch takes the rest."""
        self.begun = self._begin(epoch, last_round, turns)
        return self.begun.started

    def _begin(self, epoch: int, last_round: int, turns: direct_eval.Turns | None) -> _Begun:
        fed, stop = self.fed, self.fed.early_stop
        validation = fed.train_rows.validation
        assert stop is not None and validation is not None
        self.settle()
        # the patience ran out at epoch e - 1 (its figure is in, whichever way it was scored)
        stopping = stop.due and epoch + 1 < fed.config.epochs
        last = epoch + 1 >= fed.total_epochs
        if stopping or last:
            return _Begun(epoch, stopping, None)
        started = direct_eval.start(
            fed, "train", validation, hold=True, keep=self.keep, turns=turns
        )
        if started is None:
            return _Begun(epoch, stopping, None)
        if self.keep is not None:  # a holder not called now keeps with a call of its own
            round_id, holders = self.keep
            self.keep = (round_id, tuple(set(holders) - set(started.blocks)))
            self._keep_now()
        fed.validation_turns.update(dict.fromkeys(started.blocks, max(last_round, 0)))
        self.pending = _Pending(epoch, last_round, started)
        return _Begun(epoch, stopping, started)

    def settle(self) -> None:
        """The verdict on epoch e - 1, whose validation is in flight (its reports are back
        by the end of epoch e): into the record, a best epoch's keep due with the next call."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        report = direct_eval.finish(self.fed, pending.started)
        holders = list(pending.started.blocks)
        if self.observe(pending.epoch, report, pending.last_round, holders):
            self.keep = (pending.last_round, pending.started.blocks)

    def _keep_now(self) -> None:
        """A best epoch's keep that no validation call carried (the next one was not on the
        direct plane): a keep call (the parties keep the copy they held of its round)."""
        if self.keep is None:
            return
        fed = self.fed
        round_id, holders = self.keep
        self.keep = None
        blocks = [b for b in sorted(holders) if fed.liveness.state.get(b) != DOWN]
        if blocks:
            fed.transport.snapshot(round_id, blocks, restore=False)
