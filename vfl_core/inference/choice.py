"""What the validation split chooses after training: the subset of parties each observed set is
predicted from, and a binary task's decision threshold (TrainConfig.subset_choice, .threshold).

Both read only the validation samples that early stopping holds out of the train split
(vfl_core.training.early_stop), through the same label-party scoring as every evaluation: the
coordinator sees aggregates (confusion counts, histograms of probabilities, error sums), never a
label, and never a test row.

- **Subsets.** LASER-VFL gives a predictor for every subset of the blocks a sample has. For
  each observed pattern P of the validation samples, each subset S of P (all of them up to
  vfl_core.inference.subsets.MAX_ALL_SUBSETS parties, else the full set and each leave-one-out
  set) is evaluated on the validation samples of P with only the parties of S called; P is
  then predicted from the S with the best validation metric (the one early stopping watches:
  vfl_core.inference.headline.watched: accuracy, Brier score for binary tasks, RMSE), by
  the one-standard-error rule (Breiman et al. 1984, "Classification and Regression Trees"
  s. 3.4.3; Hastie et al., "The Elements of Statistical Learning" s. 7.10): the full set
  stays unless the best subset beats it by more than that subset's standard error on those
  samples (vfl_core.inference.metrics.standard_error). A strictly-better rule (the issue's
  literal "never worse on validation than any subset", `subset_choice: best`) follows the
  noise of a few hundred validation samples: on a census-like table it left out a party whose
  Brier score differed by 0.0007 (standard error 0.014) and cost 0.4-0.8 test points
  (docs/tabular-defaults.md). So on validation the federation is never worse than any subset
  by more than one standard error, the label party alone included. A subset that leaves some
  of P's samples unscored (no head in it) is no candidate. A pattern with fewer than
  MIN_CHOICE_SAMPLES validation samples keeps the full set.
- **The concatenating head** (TrainConfig.concat_head). Where the label parties also trained a
  head on the zero-filled concatenation of the present embeddings, it is one more candidate of
  each pattern that holds a label party (a single party's pattern included): P from all its
  parties through that head. By the same rule it replaces LASER-VFL's heads only when it beats
  the full set by more than its own standard error, and never on a pattern with fewer than
  MIN_CHOICE_SAMPLES validation samples. With TrainConfig.concat_choice "all", it is chosen
  once for every pattern holding a label party instead: on all their validation samples
  together, the concatenating heads on each pattern against LASER-VFL's heads with the subsets
  chosen per pattern, by the same rule (a pattern's few samples no longer decide alone).
- **The linear heads** (ModelConfig.linear_lane; vfl_core.model.linear_lane). Where the towers
  carry lanes, the label parties' logistic or ridge regression of the joined columns is a third
  candidate of that pooled choice, taken where it scores better than both others
  (`linear_wins`).
- **Threshold.** With the subsets chosen, the federation's positive-class probabilities of the
  validation samples come back as histograms (vfl_core.inference.scoring.AUC_BINS bins); the
  threshold is Platt scaling's ("platt", which "auto" is: a logistic fit of the label to the
  logit of the probability, predicting positive where the fit says >= 0.5), or the bin edge with
  the best accuracy ("accuracy"; "accuracy-1se": only if better than 0.5 by more than one
  standard error) or F1 ("f1") of the federation's prediction (0.5 on ties), and the positive
  class is predicted where P(positive) >= threshold, by every head and the federation.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from vfl_core.inference.chosen import Candidate, ValidationChoice
from vfl_core.inference.federation_view import Ask, EvaluatingFederation
from vfl_core.inference.headline import LOWER_IS_BETTER, watched
from vfl_core.inference.metrics import FEDERATION, EvalReport, Pattern, standard_error
from vfl_core.inference.scoring import AUC_BINS
from vfl_core.inference.subsets import observed_subsets
from vfl_core.methods.spec import BLEND, CONCAT, LINEAR

log = logging.getLogger(__name__)

# Fewer validation samples than this choose nothing: a pattern keeps the full set, a task the
# threshold 0.5 (and a threshold also needs MIN_CLASS_SAMPLES of each class). On a split this
# small the best of several candidates is mostly the luckiest (docs/tabular-defaults.md).
MIN_CHOICE_SAMPLES = 50
MIN_CLASS_SAMPLES = 10
# The validation metric each TrainConfig.threshold rule reports at 0.5 and at its threshold (and
# that "accuracy" and "f1" maximise). Accuracy is what tables are judged by: the F1 rule traded
# 2.4 accuracy points on a skewed table and made a label party alone unstable
# (docs/tabular-defaults.md, "The threshold").
THRESHOLD_METRIC = {
    "auto": "accuracy",
    "accuracy": "accuracy",
    "accuracy-1se": "accuracy",
    "platt": "accuracy",
    "f1": "f1",
}
# The rule "auto" stands for: Platt scaling, two fitted numbers where the accuracy's argmax over
# 999 edges moved on 3-4 validation samples (Credit's threshold 0.33-0.61 over ten seeds against
# Platt's 0.38-0.52); over 42 binary (table, seed) runs it scored 0.12 points more test accuracy
# on average and no table lost more than its seed-sd (docs/tabular-defaults.md, "The threshold:
# one standard error and Platt scaling").
AUTO_THRESHOLD = "platt"
# Platt scaling's Newton steps: at most this many, until the step is below PLATT_TOLERANCE.
PLATT_STEPS = 50
PLATT_TOLERANCE = 1e-9


def choose_subsets(
    fed: EvaluatingFederation, validation: np.ndarray, margin: bool = True, per_set: bool = True
) -> tuple[dict[Pattern, Pattern], dict[Pattern, str], dict[Pattern, list[Candidate]]]:
    """For each observed pattern of the validation samples (key indices of the train
    alignment), the subset of its parties, or (`per_set`) the concatenating head on all of them,
    with the best headline metric on them: by the one-standard-error rule (`margin`), or
    strictly the best. Returns the patterns given a subset, those given other heads, and every
    candidate."""
    key = watched(fed.task, fed.num_classes)
    lower = key in LOWER_IS_BETTER
    al = fed.alignments["train"]
    chosen: dict[Pattern, Pattern] = {}
    heads: dict[Pattern, str] = {}
    record: dict[Pattern, list[Candidate]] = {}
    # every candidate of every pattern first: their evaluations depend on no choice, so they
    # go out together (one fan-out on the direct plane: Federation.evaluate_many)
    asked: list[tuple[Pattern, Pattern, Ask]] = []
    for pattern, index in sorted(al.patterns().items()):
        rows = np.intersect1d(index, validation)  # (n,) ascending
        concat = per_set and fed.spec.concat_head and bool(set(pattern) & set(fed.label_blocks))
        if (len(pattern) < 2 and not concat) or len(rows) < MIN_CHOICE_SAMPLES:
            continue
        everyone = set(fed.infos)
        for subset in observed_subsets(pattern):
            served = everyone - (set(pattern) - set(subset))  # the pattern's others not called
            asked.append((pattern, subset, Ask("train", served, rows)))
        if concat:  # every party of the pattern, through the concatenating heads
            asked.append((pattern, tuple(pattern), Ask("train", everyone, rows, head=CONCAT)))
    reports = fed.evaluate_many([a for _, _, a in asked])
    for (pattern, subset, ask), report in zip(asked, reports, strict=True):
        record.setdefault(pattern, []).append(_scored(key, subset, report, ask.head or ""))
    for pattern, cands in record.items():
        best = best_candidate(cands, lower, margin)
        if best is None or best is cands[0]:
            continue
        if best.head:
            heads[pattern] = best.head
        else:
            chosen[pattern] = best.blocks
        log.info(
            "validation: observed set %s predicted from %s%s (%s %.4f, all of them %s)",
            list(pattern),
            list(best.blocks),
            f" with the {best.head} heads" if best.head else "",
            key,
            best.value,
            cands[0].value,
        )
    return chosen, heads, record


def choose_heads_pooled(
    fed: EvaluatingFederation, validation: np.ndarray, chosen: ValidationChoice, margin: bool = True
) -> None:
    """concat_choice "all": the concatenating heads, the linear heads (MethodSpec.linear_head) or
    the mean of every head's predictions (BLEND, MethodSpec.blend_members) for every pattern
    that holds a label party (dropping the subsets chosen there), if on all those patterns'
    validation samples together they beat LASER-VFL's heads with `chosen`'s subsets: the
    concatenating heads by more than their standard error (`margin`; else if better at all),
    the linear heads if better than both (`linear_wins`), the blend by `blend_wins`; `chosen`
    is the run's choice in effect (fed.choice), changed in place."""
    key = watched(fed.task, fed.num_classes)
    patterns = [
        (p, i)
        for p, i in sorted(fed.alignments["train"].patterns().items())
        if set(p) & set(fed.label_blocks)
    ]
    rows = np.intersect1d(np.concatenate([i for _, i in patterns] or [[]]), validation)
    if len(rows) < MIN_CHOICE_SAMPLES:
        return
    # LASER-VFL's heads with the per-pattern subsets in effect, the other heads without them:
    # all together (one fan-out on the direct plane)
    everyone = set(fed.infos)
    others = [*fed.spec.extra_head_names, *([BLEND] if fed.spec.blend_members else [])]
    reports = fed.evaluate_many(
        [
            Ask("train", everyone, rows, choice=chosen),
            *(
                Ask("train", everyone, rows, head=h, choice=replace(chosen, subsets={}))
                for h in others
            ),
        ]
    )
    chosen.pooled = [
        _scored(key, (), report, head) for head, report in zip(["", *others], reports, strict=True)
    ]
    best = pooled_pick(chosen.pooled, key in LOWER_IS_BETTER, margin)
    if best is not None and best.head:
        mine = {p for p, _ in patterns}
        chosen.heads = dict.fromkeys(mine, best.head)
        chosen.subsets = {p: s for p, s in chosen.subsets.items() if p not in mine}
        log.info(
            "validation: every observed set holding a label party predicted with the %s heads "
            "(%s %.4f, LASER-VFL's %s)",
            best.head,
            key,
            best.value,
            chosen.pooled[0].value,
        )


def _scored(key: str, subset: Pattern, report: EvalReport, head: str = "") -> Candidate:
    """`subset` of a pattern as its evaluation on the validation rows scored it."""
    value = getattr(report.overall(), key) if report.scored else None
    error = standard_error(report, key) if report.scored else None
    return Candidate(subset, value, report.scored, error, head)


def best_candidate(cands: list[Candidate], lower: bool, margin: bool = True) -> Candidate | None:
    """The candidate with the best value among those that score as many samples as the full
    set (the first, which wins ties). With `margin`, a subset replaces the full set only when
    it is better by more than its own standard error (the one-standard-error rule)."""
    full = cands[0]
    usable = [c for c in cands if c.value is not None and c.scored >= full.scored]
    if not usable:
        return None
    sign = 1.0 if lower else -1.0
    best = min(usable, key=lambda c: sign * float(c.value))  # type: ignore[arg-type]
    if not margin or best is full or full.value is None:
        return best
    gain = sign * (float(full.value) - float(best.value))  # type: ignore[arg-type]
    return best if gain > (best.error or 0.0) else full


def pooled_pick(pooled: list[Candidate], lower: bool, margin: bool) -> Candidate | None:
    """The pooled candidate chosen (`choose_heads_pooled`): of LASER-VFL's and the
    concatenating heads by `best_candidate`; the linear heads instead where `linear_wins`
    against those two; the blend instead of that pick where `blend_wins` over it."""
    by_head = {c.head: c for c in pooled}
    linear, blend = by_head.get(LINEAR), by_head.get(BLEND)
    plain = [c for c in pooled if c.head not in (LINEAR, BLEND)]
    best = best_candidate(plain, lower, margin)
    if linear is not None and linear_wins(linear, [*plain, linear], lower):
        best = linear
    if blend is not None and best is not None and blend_wins(blend, best, pooled[0], lower):
        best = blend
    return best


def blend_wins(blend: Candidate, picked: Candidate, full: Candidate, lower: bool) -> bool:
    """Whether the mean of the heads' predictions (`blend`) replaces the heads the choice picked
    without it (`picked`): where it scores strictly better on validation (on as many samples
    as `full`, the first candidate), by no margin. Read from one grid run beside wider and
    narrower rules (better than every other candidate; by half or one standard error): this
    one took it in 73 of 216 runs, 59 of which scored better on test, 12 worse
    (benchmarks/results/tabular.md, `tabular-vertibench-blend-rules`)."""
    if blend.value is None or picked.value is None or blend.scored < full.scored:
        return False
    sign = 1.0 if lower else -1.0
    return sign * float(blend.value) < sign * float(picked.value)


def linear_wins(linear: Candidate, cands: list[Candidate], lower: bool) -> bool:
    """Whether the linear heads (`linear`, one of `cands`) are chosen: only where they score
    strictly better than every other candidate (and as many samples as the first). No margin
    of standard errors either way: each candidate's own standard error on a few hundred
    validation samples is wider than the differences between these heads that matter on test
    (measured: benchmarks/results/tabular.md, `tabular-vertibench-linear-lane-rules`)."""
    usable = [c for c in cands if c.value is not None and c.scored >= cands[0].scored]
    if linear not in usable:
        return False
    sign = 1.0 if lower else -1.0
    others = [sign * float(c.value) for c in usable if c is not linear]  # type: ignore[arg-type]
    return all(sign * float(linear.value) < v for v in others)  # type: ignore[arg-type]


def best_threshold(histogram: np.ndarray, metric: str = "f1") -> tuple[float, float, float]:
    """(threshold, the metric there, the metric at 0.5) from (2, AUC_BINS) counts of the
    federation's positive-class probability (row 0 the negatives', row 1 the positives');
    `metric` is "f1" or "accuracy". The positive class is predicted from bin t on,
    P >= t / AUC_BINS; of equal scores the edge nearest 0.5 wins (so 0.5 stays unless another
    edge is strictly better)."""
    edges = np.arange(1, AUC_BINS)  # thresholds strictly inside (0, 1)
    score = edge_scores(histogram, metric)
    best = score.max()
    ties = edges[score == best]
    edge = int(ties[np.argmin(np.abs(ties - AUC_BINS // 2))])
    return edge / AUC_BINS, float(best), float(score[AUC_BINS // 2 - 1])


def choose_threshold(
    fed: EvaluatingFederation,
    validation: np.ndarray,
    rule: str = "auto",
    report: EvalReport | None = None,
) -> tuple[float, float, float] | None:
    """The threshold with the best validation score of the federation's prediction (the rule's
    THRESHOLD_METRIC), as `best_threshold` returns it; None when fewer than MIN_CHOICE_SAMPLES
    were scored, or MIN_CLASS_SAMPLES of a class. `report`: the validation samples' evaluation
    with the federation's scores, when the caller made it (else made here)."""
    if report is None:
        report = fed.evaluate("train", index=validation, federation_scores=True)
    stats = report.by_pattern.values()
    pooled = [s.histograms[FEDERATION] for s in stats if FEDERATION in s.histograms]
    if not pooled:
        return None
    histogram = np.sum(pooled, axis=0)  # (2, AUC_BINS)
    negatives, positives = histogram.sum(axis=1)
    if negatives + positives < MIN_CHOICE_SAMPLES or min(negatives, positives) < MIN_CLASS_SAMPLES:
        # said, not silent: a rare positive class is where a chosen threshold matters most
        log.warning(
            "validation: decision threshold left at 0.5 (--threshold %s not applied): the "
            "validation samples hold %d positives and %d negatives, a threshold needs %d of each "
            "class and %d in all (a larger --validation-fraction gives it more)",
            rule,
            positives,
            negatives,
            MIN_CLASS_SAMPLES,
            MIN_CHOICE_SAMPLES,
        )
        return None
    return threshold_of(histogram, rule)


def threshold_of(histogram: np.ndarray, rule: str) -> tuple[float, float, float]:
    """(threshold, the rule's THRESHOLD_METRIC there, and at 0.5) of a TrainConfig.threshold
    rule from the validation histogram (best_threshold's)."""
    rule = AUTO_THRESHOLD if rule == "auto" else rule
    if rule == "platt":
        edge = platt_edge(histogram)
    elif rule == "accuracy-1se":
        edge = one_se_edge(histogram)
    else:
        return best_threshold(histogram, THRESHOLD_METRIC[rule])
    accuracy = edge_scores(histogram, "accuracy")
    return edge / AUC_BINS, float(accuracy[edge - 1]), float(accuracy[AUC_BINS // 2 - 1])


def edge_scores(histogram: np.ndarray, metric: str) -> np.ndarray:
    """(AUC_BINS - 1,) `metric` ("f1" or "accuracy") of predicting positive from each bin edge
    1 .. AUC_BINS - 1 on."""
    negatives, positives = histogram.astype(np.float64)
    edges = np.arange(1, AUC_BINS)  # thresholds strictly inside (0, 1)
    tp = np.cumsum(positives[::-1])[::-1][edges]  # positives at or above each edge
    fp = np.cumsum(negatives[::-1])[::-1][edges]
    fn = positives.sum() - tp
    if metric == "accuracy":
        total = max(positives.sum() + negatives.sum(), 1.0)
        return (tp + negatives.sum() - fp) / total
    denom = 2 * tp + fp + fn
    return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)


def one_se_edge(histogram: np.ndarray) -> int:
    """The bin edge of the best validation accuracy ("accuracy"'s), if it beats 0.5 by more than
    one standard error of the paired difference, else 0.5's (AUC_BINS // 2). The standard error
    is McNemar's: the samples whose decision differs between the two thresholds are those
    between them, and with m of n changed, sqrt(m) / n (the difference of two accuracies on the
    same samples, under no difference). It is the one-standard-error rule of the subsets
    (`best_candidate`): the argmax over 999 edges moves on 3-4 of 288 Credit validation samples
    and its test accuracy with it (docs/tabular-defaults.md, "The threshold: one standard error
    and Platt scaling")."""
    half = AUC_BINS // 2
    best, tuned, plain = best_threshold(histogram, "accuracy")
    edge = round(best * AUC_BINS)
    counts = histogram.sum(axis=0)  # (AUC_BINS,) both classes
    n = int(counts.sum())
    changed = int(counts[min(edge, half) : max(edge, half)].sum())
    gained = round((tuned - plain) * n)  # samples more right than at 0.5
    # in whole samples, so that a gain of one sample among one changed never counts
    moved = gained * gained > changed
    log.info(
        "validation: the best accuracy's threshold %.3f is right on %d samples more than 0.5 "
        "(%d of %d change decision; one standard error %.1f samples): %s",
        best,
        gained,
        changed,
        n,
        np.sqrt(changed),
        "taken" if moved else "0.5 kept",
    )
    return edge if moved else half


def platt_edge(histogram: np.ndarray) -> int:
    """The bin edge of Platt scaling (Platt 1999, "Probabilistic outputs for support vector
    machines"): p' = sigmoid(a * logit(p) + b) fitted by maximum likelihood to the validation
    histogram (each bin's centre, weighted by its counts of each class, with Platt's targets
    (N+ + 1) / (N+ + 2) and 1 / (N- + 2), which keep a separable histogram finite), and the
    positive class predicted where p' >= 0.5: p >= sigmoid(-b / a), rounded to the nearest
    edge. Two fitted numbers instead of an argmax over AUC_BINS - 1 edges. 0.5's edge where
    the fit fails, a <= 0 (the scores not increasing in the positive class) or the threshold
    falls outside the inner edges, said in the log."""
    fitted = platt_fit(histogram)
    edge, why = _platt_edge_of(fitted)
    if edge is None:
        log.warning("validation: decision threshold left at 0.5 (--threshold platt): %s", why)
        return AUC_BINS // 2
    log.info("validation: Platt scaling a=%.4f b=%.4f: %s", *(fitted or (0.0, 0.0)), why)
    return edge


def _platt_edge_of(fitted: tuple[float, float] | None) -> tuple[int | None, str]:
    """The inner bin edge nearest sigmoid(-b / a), or None, and why (for the log)."""
    if fitted is None:
        return None, "the fit did not converge"
    a, b = fitted
    if not a > 0:
        return None, f"the fitted slope {a:.4g} is not positive"
    threshold = 1.0 / (1.0 + np.exp(float(np.clip(b / a, -50.0, 50.0))))  # sigmoid(-b / a)
    edge = int(np.rint(threshold * AUC_BINS))
    if not 1 <= edge < AUC_BINS:  # a slope near 0 (scores that tell nothing) puts it there
        return None, f"the fitted threshold {threshold:.4g} is outside the histogram's edges"
    return edge, f"threshold {threshold:.4f}, edge {edge / AUC_BINS:.3f}"


def platt_fit(histogram: np.ndarray) -> tuple[float, float] | None:
    """(a, b) of sigmoid(a * logit(p) + b) fitted by Newton's method (with step halving) to
    the (2, AUC_BINS) histogram, or None where it does not converge."""
    negatives, positives = histogram.astype(np.float64)
    centres = np.clip((np.arange(AUC_BINS) + 0.5) / AUC_BINS, 1e-6, 1 - 1e-6)
    x = np.log(centres / (1 - centres))
    hi = (positives.sum() + 1) / (positives.sum() + 2)
    lo = 1 / (negatives.sum() + 2)
    # each bin twice: its positives with target hi, its negatives with target lo
    x, weight = np.concatenate([x, x]), np.concatenate([positives, negatives])
    target = np.concatenate([np.full(AUC_BINS, hi), np.full(AUC_BINS, lo)])
    keep = weight > 0
    x, weight, target = x[keep], weight[keep], target[keep]
    design = np.stack([x, np.ones_like(x)], axis=1)  # (m, 2)
    theta = np.array([1.0, 0.0])  # the identity: calibrated scores

    def loss(t: np.ndarray) -> float:
        z = design @ t  # -log likelihood, stably: log(1 + e^z) - target * z
        return float(np.sum(weight * (np.logaddexp(0.0, z) - target * z)))

    current = loss(theta)
    for _ in range(PLATT_STEPS):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        gradient = design.T @ (weight * (p - target))
        hessian = (design * (weight * p * (1 - p))[:, None]).T @ design
        try:
            step = np.linalg.solve(hessian + 1e-12 * np.eye(2), gradient)
        except np.linalg.LinAlgError:
            return None
        shrink = 1.0
        while shrink > 1e-6 and loss(theta - shrink * step) > current:
            shrink /= 2
        theta = theta - shrink * step
        current = loss(theta)
        if not np.all(np.isfinite(theta)):
            return None
        if np.max(np.abs(shrink * step)) < PLATT_TOLERANCE:
            return float(theta[0]), float(theta[1])
    return None
