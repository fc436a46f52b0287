"""What the validation split chose after training, as a record: the candidates it scored, the
subset of parties and the heads each observed set is predicted from, and the decision threshold
(the choosing itself is vfl_core.inference.choice). Its own module so that the inference layer's
view of the federation (federation_view) can name it without importing the choice."""

from __future__ import annotations

from dataclasses import dataclass, field

from vfl_core.inference.metrics import Pattern


@dataclass(frozen=True)
class Candidate:
    """One subset of an observed pattern, as the validation samples scored it."""

    blocks: Pattern
    value: float | None  # the headline metric on the pattern's validation samples (None: unscored)
    scored: int
    error: float | None = None  # the value's standard error (metrics.standard_error)
    head: str = ""  # the heads that predicted it (PredictCall.head; "": the method's own)


@dataclass
class ValidationChoice:
    """The subset of parties each observed set is predicted from, and the decision threshold."""

    threshold: float | None = None  # binary: P(positive) threshold; None: the argmax (0.5)
    subsets: dict[Pattern, Pattern] = field(default_factory=dict)  # observed set -> kept parties
    candidates: dict[Pattern, list[Candidate]] = field(default_factory=dict)  # for the record
    heads: dict[Pattern, str] = field(default_factory=dict)  # observed set -> PredictCall.head
    # concat_choice "all": LASER-VFL's heads (with the subsets), then the concatenating heads,
    # scored on the validation samples of every pattern holding a label party
    pooled: list[Candidate] = field(default_factory=list)
    # the rule's validation score (THRESHOLD_METRIC) at 0.5 and at the threshold
    threshold_f1: tuple[float, float] | None = None
    threshold_metric: str | None = None  # the rule's metric, once a threshold is chosen
    threshold_rule: str | None = None  # the TrainConfig.threshold rule that chose it ("auto"'s)

    def kept(self, available: Pattern) -> Pattern:
        """The parties of an observed set that predict it (all of them where nothing was
        chosen)."""
        return self.subsets.get(available, available)

    def head(self, available: Pattern) -> str:
        """The heads that predict an observed set ("": the method's own)."""
        return self.heads.get(available, "")

    def to_json(self) -> dict[str, object]:
        """What results.json and the coordinator's checkpoint hold."""
        return {
            "threshold": self.threshold,
            "threshold_f1": None if self.threshold_f1 is None else list(self.threshold_f1),
            "threshold_metric": self.threshold_metric,
            "threshold_rule": self.threshold_rule,
            "subsets": [
                {"observed": list(p), "kept": list(s)} for p, s in sorted(self.subsets.items())
            ],
            "heads": [{"observed": list(p), "head": h} for p, h in sorted(self.heads.items())],
            "pooled": [_candidate_json(c) for c in self.pooled],
            "candidates": [
                {
                    "observed": list(p),
                    "scores": [_candidate_json(c) for c in cands],
                }
                for p, cands in sorted(self.candidates.items())
            ],
        }

    @classmethod
    def from_json(cls, saved: dict) -> ValidationChoice:
        f1 = saved.get("threshold_f1")
        return cls(
            threshold=saved.get("threshold"),
            subsets={tuple(s["observed"]): tuple(s["kept"]) for s in saved.get("subsets", [])},
            candidates={
                tuple(c["observed"]): [_candidate_of(x) for x in c["scores"]]
                for c in saved.get("candidates", [])
            },
            threshold_f1=None if f1 is None else (float(f1[0]), float(f1[1])),
            # older files wrote "f1" whether or not a threshold was chosen (the F1 rule)
            threshold_metric=saved.get("threshold_metric") if saved.get("threshold") else None,
            threshold_rule=saved.get("threshold_rule") if saved.get("threshold") else None,
            heads={tuple(h["observed"]): str(h["head"]) for h in saved.get("heads", [])},
            pooled=[_candidate_of(x) for x in saved.get("pooled", [])],
        )


def _candidate_json(c: Candidate) -> dict[str, object]:
    out = {"blocks": list(c.blocks), "value": c.value, "scored": c.scored, "error": c.error}
    return {**out, "head": c.head} if c.head else out


def _candidate_of(x: dict) -> Candidate:
    blocks = tuple(x["blocks"])
    return Candidate(blocks, x["value"], int(x["scored"]), x.get("error"), x.get("head", ""))
