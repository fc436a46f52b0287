"""The tabular settings sweep with the validation-side settings of issue 45's item 3: a
stratified validation split, the concatenating head chosen per observed set, and a log target
for regression, side by side with the defaults (`python -m benchmarks.fusion_sweep`, the
options of benchmarks.tabular_sweep; its summaries read the same directories)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import tabular_sweep as sweep

FUSION: dict[str, list[str]] = {
    "stratified": ["--validation-split", "stratified"],
    "concat-stratified": ["--concat-head", "--validation-split", "stratified"],
    "log-target": ["--target-transform", "log"],
    "log-auto": ["--target-transform", "auto"],
}
sweep.SETTINGS.update(FUSION)


def main() -> None:
    out = Path("benchmarks/results/runs/tabular-sweep-fusion")
    sweep.run_cli(sweep.SETTINGS, sweep.worker, sweep.setting_payload, out, "sweep", __doc__)


if __name__ == "__main__":
    main()
