"""The run's alignment: which parties hold which samples of each split, built from their keys
(PSI values or keyed ID hashes), built again when a party comes back holding samples the plan
lacks, and the PSI keys sent again to a party that restarted.

Part of the round engine (vfl_core.training.engine.Federation composes it). The alignments it
builds are the run's (`Federation.alignments`); the batch plan cut from them is
vfl_core.data.batch_plan's.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.data.batch_plan import Alignment
from vfl_core.protocol import PartyInfo, PsiCall
from vfl_core.training import psi
from vfl_core.training.alignment import key_list_fault
from vfl_core.training.retry import Backoff, retry_until

if TYPE_CHECKING:
    from vfl_core.training.ports import AlignerRun

log = logging.getLogger(__name__)

ALIGN_RETRY_PAUSE_S = 2.0  # between attempts to align a party that did not answer


class Aligner:
    """Aligns a run's splits with the parties that answer, and again when one comes back."""

    def __init__(self, fed: AlignerRun) -> None:
        self.fed = fed
        # a party missing from the alignment was heard from again: align again at the next
        # epoch's start (or before the test table or a prediction)
        self.due = False
        # blocks that registered again holding other rows: not called until aligned again
        self.other_rows: set[int] = set()

    def align(self, splits: tuple[str, ...], retry_s: float | None) -> None:
        """Align every split with the parties that answer, asking those that do not again for
        `retry_s` (None: the run's `align_retry_s`); the ones still missing from a split are
        `unaligned` (they join later). Then the train split's validation rows are held out
        and its class weights asked (vfl_core.training.train_rows)."""
        fed = self.fed
        give_up = time.monotonic() + (fed.align_retry_s if retry_s is None else retry_s)
        for split in splits:
            missing = self._asking_again(split, give_up)
            if missing:
                log.warning(
                    "aligned %s without blocks %s: each joins once it is heard from again, at "
                    "an epoch's start (after training: before the test table or a prediction)",
                    split,
                    missing,
                )
        fed.unaligned = {b for split in fed.alignments for b in self.missing(split)}
        self.due = False
        if fed.early_stop is not None and "train" in splits and "train" in fed.alignments:
            fed.train_rows.hold_out()
        if fed.config.balance == "resample":
            fed.train_rows.weights = fed.train_rows.class_weights()

    def _asking_again(self, split: str, give_up: float) -> list[int]:
        """Align `split`, asking again every ALIGN_RETRY_PAUSE_S while some block that holds
        samples does not answer, until monotonic time `give_up`; returns those still missing."""
        return retry_until(
            lambda: self._align_split(split),
            bool,  # some block did not answer
            give_up,
            Backoff(ALIGN_RETRY_PAUSE_S),
            lambda missing, pause: log.warning(
                "aligned %s without blocks %s (no answer): asking again in %.0fs",
                split,
                missing,
                pause,
            ),
        )

    def _align_split(self, split: str) -> list[int]:
        """Align `split` with the registered parties that hold it; returns those that did not
        take part."""
        fed = self.fed
        fed.infos = fed.transport.infos()
        blocks = [b for b, i in fed.infos.items() if i.samples.get(split, 0) > 0]
        if not blocks:
            return []
        if fed.alignment == "psi":
            keys = psi.psi_align(fed.transport, split, blocks)
        else:
            keys = fed.transport.id_hashes(split, blocks)
        # ordered by the parties' rows, not by the keys: PSI and keyed hashes plan alike
        fed.alignments[split] = Alignment.build(self._sound(split, keys))
        al = fed.alignments[split] = fed.alignments[split].with_label_only(
            self._feature_rows(split)
        )
        log.info(
            "aligned %s: %d samples in %d observed patterns", split, len(al), len(al.patterns())
        )
        for block in al.unshared():
            log.warning(
                "aligned %s: block %d (%s) shares none of its %d samples with another party: "
                "are the sample IDs written alike at every party (leading zeros, case, spaces, "
                "prefixes)? Nothing of this block would be federated",
                split,
                block,
                fed.infos[block].party_id,
                int((al.rows[block] >= 0).sum()),
            )
        return self.missing(split)

    def _sound(self, split: str, keys: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
        """The blocks' key lists that fit the rows they registered; a party's list that does
        not (a bug, or a party out to break the alignment) leaves that party out, as if it had
        not answered, instead of stopping the run."""
        sound = {}
        for block, block_keys in sorted(keys.items()):
            info = self.fed.infos[block]
            fault = key_list_fault(block_keys, info.samples.get(split, 0))
            if fault is None:
                sound[block] = block_keys
                continue
            log.warning(
                "aligned %s without block %d (%s): its sample keys are refused (%s)",
                split,
                block,
                info.party_id,
                fault,
            )
        return sound

    def missing(self, split: str) -> list[int]:
        """Registered blocks that hold samples of `split` but are not in its alignment."""
        al = self.fed.alignments.get(split)
        held = [b for b, i in sorted(self.fed.infos.items()) if i.samples.get(split, 0) > 0]
        return [b for b in held if al is None or b not in al.rows]

    def _feature_rows(self, split: str) -> dict[int, int]:
        """block -> rows of `split` with features, for the parties that also hold label-only
        rows (after those)."""
        return {
            b: i.samples.get(split, 0) - i.label_only[split]
            for b, i in self.fed.infos.items()
            if i.label_only.get(split, 0) > 0
        }

    def again_if_due(self, when: str | None = None) -> None:
        """At an epoch's start (`when` None): a party missing from the alignment was heard from
        again (it registered again, or registered late), so align again with it. The plan of
        this and later epochs includes it; the epochs before keep theirs. Elsewhere (`when`)
        a party that does not answer is not waited for: it is down, and nothing trains."""
        fed = self.fed
        if not self.due or (when is None and fed.cursor.position):
            return
        before = set(fed.alignments["train"].rows) if "train" in fed.alignments else set()
        fed.align(retry_s=None if when is None else 0.0)
        # not called since they came back on other rows (and down, if they were): call them
        renewed = sorted(self.other_rows & set(fed.alignments["train"].rows))
        for block in renewed:
            fed.presence.call_again(block, fed.tick)
        self.other_rows.clear()
        log.warning(
            "%s: aligned again; blocks %s joined, %s on their new rows, %s still missing",
            when or f"epoch {fed.cursor.epoch + 1}",
            sorted(set(fed.alignments["train"].rows) - before),
            renewed,
            sorted(fed.unaligned),
        )

    def holds_other_rows(self, block: int, info: PartyInfo | None) -> bool:
        """Whether a party that registered again counts other rows than when it was aligned (a
        restart on another data set): said, and true; it is not called on the old rows (it would
        refuse them) until it is aligned again (`again_if_due`)."""
        old = self.fed.infos[block]
        if info is None or (info.samples, info.label_only) == (old.samples, old.label_only):
            return False
        changes = ", ".join(
            f"{split} {old.samples.get(split, 0)} -> {info.samples.get(split, 0)}"
            for split in sorted({*old.samples, *info.samples})
            if old.samples.get(split, 0) != info.samples.get(split, 0)
        )
        log.warning(
            "block %d (%s) registered again holding other rows (%s): aligned again at the "
            "next epoch's start (after training: before the test table or a prediction), and "
            "called again from there",
            block,
            info.party_id,
            changes or "label-only rows",
        )
        return True

    def resend_psi_keys(self, block: int) -> None:
        """A restarted party has lost the PSI values of its rows (its batch digests use them):
        send them again, in its row order."""
        for split, al in self.fed.alignments.items():
            rows = al.rows.get(block)
            if rows is None:
                continue
            held = np.flatnonzero(rows >= 0)
            keys = [b""] * len(held)
            for i in held:
                keys[int(rows[i])] = al.keys[int(i)]
            self.fed.transport.psi_keys({block: PsiCall(split, psi.new_session(), keys)})
