"""The heads a run predicts with where nothing was held out to choose them on
(TrainConfig.unvalidated_heads; vfl_core.training.validation.Validator.choose).

A table of a few hundred rows holds out no validation split (vfl_core.training.train_rows): no
pick between LASER-VFL's heads, the concatenating and the linear heads can be made, and each of
them may be the worse on a given table. For a regression the mean of their values (BLEND) is
then the safe prediction: under squared error the mean of several predictions is never worse
than the mean of their errors (Jensen's inequality; Hastie et al., "The Elements of Statistical
Learning" s. 8.8, model averaging), so without rows to choose on, averaging the model families
bounds the loss by their average. A class is not so bounded (an accuracy is not convex in the
probabilities), and on the small classification tables the blend lost to LASER-VFL's heads
(docs/tabular-defaults.md, "Every training row weighs the same, and a small regression
predicts with the blend").
"""

from __future__ import annotations

from collections.abc import Sequence

from vfl_core.data.learning_task import REGRESSION
from vfl_core.inference.metrics import Pattern
from vfl_core.methods.spec import BLEND, all_subsets

# Up to this many parties the rule names every set of them holding a label party (what a party
# lost at inference leaves); beyond it, the observed sets of the training rows only.
MAX_EVERY_SET = 12


def unvalidated_rule(rule: str, task: str) -> str:
    """The rule in effect, "blend" or "laser": TrainConfig.unvalidated_heads ("auto": by the
    task)."""
    if rule != "auto":
        return rule
    return "blend" if task == REGRESSION else "laser"


def unvalidated_heads(
    rule: str,
    task: str,
    blend_members: Sequence[str],
    blocks: Sequence[int],
    label_blocks: Sequence[int],
    patterns: Sequence[Pattern],
) -> dict[Pattern, str]:
    """The heads (PredictCall.head) of each observed set holding a label party, where nothing
    was held out: BLEND by the rule where the method has more than one head to blend, else none
    (LASER-VFL's own). `patterns`: the training rows' observed sets."""
    if len(blend_members) < 2 or unvalidated_rule(rule, task) != "blend":
        return {}
    sets = all_subsets(blocks) if len(blocks) <= MAX_EVERY_SET else patterns
    labels = set(label_blocks)
    return {tuple(s): BLEND for s in sets if labels & set(s)}
