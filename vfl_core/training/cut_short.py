"""Whether an evaluation is a result: one that no label party answered, or that every label
party left part-way (killed, frozen past its deadline, cut off), scored the batches answered
before, not the split. The test table (vfl_core.lifecycle), the coordinator's `Evaluate` and
early stopping's validation (vfl_core.training.validation) all ask these two questions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl_core.inference.metrics import EvalReport
from vfl_core.methods.spec import active_party

if TYPE_CHECKING:
    from vfl_core.training.ports import Run

__all__ = ["heads_left", "no_head_answered"]


def no_head_answered(fed: Run, report: EvalReport) -> bool:
    """Whether the evaluation scored nothing because no label party answered a batch."""
    return not report.scored and not _heads_answered(fed, report)


def heads_left(fed: Run, report: EvalReport) -> bool:
    """Whether the evaluation was cut short: samples went unscored, and of the label parties
    asked, none answered every batch it was asked for (they went away during it). Scored this
    way, a table holds the batches answered before, not the split: training would pause here."""
    asked = [b for b in _predictors(fed) if report.answers.get(b, [0, 0])[0]]
    return bool(report.unscored and report.scored and asked) and not any(
        report.answers[b][1] == report.answers[b][0] for b in asked
    )


def _heads_answered(fed: Run, report: EvalReport) -> bool:
    """Whether a label party answered a batch of the evaluation (then waiting changes nothing)."""
    return any(report.answers.get(b, [0, 0])[1] for b in _predictors(fed))


def _predictors(fed: Run) -> tuple[int, ...]:
    """The label parties that predict: under DVFL and DLVM only the active party (the owner);
    the other label parties' embeddings answer nothing without it."""
    if fed.spec.heads == "active_party":
        active = active_party(fed.label_blocks)
        return () if active is None else (active,)
    return tuple(fed.label_blocks)
