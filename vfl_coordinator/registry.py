"""Who is in the federation: registrations, their checks, and the wait for a quorum.

Fencing. Each registration of a new process (one that quotes no lease) is given a lease, a
random token it quotes in every heartbeat. A party registering again without a lease (a restarted
process, or a second process with the same certificate) takes the block over with a new lease;
the process holding the old one is refused from then on (FencedError) and
stops (ABORTED), so two processes of one party never alternate.

A refusal of the federation. While the parties gather, a new party refused for a reason of the
federation (its protocol, block count, classes, task or data digest disagree) ends the gathering:
`wait` raises at once, and every later registration (the registered parties' heartbeats
included) is refused with the same cause, so each party stops with one line naming it instead of
waiting out its --register-timeout.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from vfl_core.errors import ConfigError
from vfl_core.protocol import PROTOCOL_VERSION, PartyInfo, disagreement, mismatch_hint
from vfl_wire.status import AlreadyExistsError, FencedError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Member:
    info: PartyInfo
    address: str
    generation: int  # bumps on every (re-)registration, so clients reconnect to a new address
    synced: bool = True  # quoted the coordinator's session: its state matches the resume round
    lease: str = ""  # the token its process quotes in every heartbeat


class Registry:
    def __init__(self, expected: int, resuming: bool = False) -> None:
        self.expected = expected
        # a coordinator restarted from a checkpoint: a party's first registration rolls it back
        # to that checkpoint's round (resynchronising); on a fresh start it only learns the run
        self.resuming = resuming
        self._members: dict[int, Member] = {}
        self._cond = threading.Condition()
        self._generation = 0
        self._heard: dict[int, int] = {}  # block -> registrations, heartbeats included
        self._gathering = True  # until `wait` returns: a refusal then ends the federation
        self.refusal: str | None = None  # why the federation cannot start, once refused
        self._told: set[int] = set()  # member blocks refused with `refusal` since

    def register(
        self, info: PartyInfo, address: str, synced: bool = True, lease: str = ""
    ) -> tuple[str, str]:
        """Admit a party, or refuse it with a ConfigError naming the conflict; returns a message
        and the lease the party quotes from now on. A registration that changes nothing is a
        heartbeat: the generation (and the channel) stays."""
        with self._cond:
            self._refuse_if_refused(info)
            self._check_federation(info)
            previous = self._members.get(info.block)
            if previous is not None and previous.info.party_id != info.party_id:
                raise AlreadyExistsError(
                    f"block {info.block} is already held by party {previous.info.party_id!r}"
                )
            self._fence(info, address, lease, previous)
            lease = lease or secrets.token_hex(8)  # a new process: a new lease
            self._heard[info.block] = self._heard.get(info.block, 0) + 1
            self._cond.notify_all()
            if previous is not None and (
                previous.info,
                previous.address,
                previous.synced,
                previous.lease,
            ) == (info, address, synced, lease):
                return "alive", lease
            self._generation += 1
            self._members[info.block] = Member(info, address, self._generation, synced, lease)
            verb = "rejoined" if previous is not None else "registered"
            if previous is not None and synced and not previous.synced:
                verb = "synchronised"
            catching_up = "resynchronising" if self.resuming else "joining the run"
            verb = verb if synced else f"{verb} ({catching_up})"
            log.info("party %s %s for block %d at %s", info.party_id, verb, info.block, address)
            missing = self.expected - len(self._members)
            message = f"{verb}; waiting for {missing} more parties" if missing > 0 else f"{verb}"
            return message, lease

    def _fence(self, info: PartyInfo, address: str, lease: str, held: Member | None) -> None:
        """Refuse a lease that is not the block's; log a takeover by a new process."""
        if held is None:
            return  # a first registration, or the first after a coordinator restart
        if lease and lease != held.lease:
            log.warning(
                "refused party %s at %s: its lease was superseded by the process at %s",
                info.party_id,
                address,
                held.address,
            )
            raise FencedError(
                f"party {info.party_id} registered again from another process (at "
                f"{held.address}) since this one (at {address}) did: this one is fenced off"
            )
        if not lease and held.lease:
            log.warning(
                "party %s: a new process at %s takes block %d over from the one at %s, which "
                "is fenced off",
                info.party_id,
                address,
                info.block,
                held.address,
            )

    def _refuse_if_refused(self, info: PartyInfo) -> None:
        """After a refusal of the federation, every registration is told its cause."""
        if self.refusal is None:
            return
        if info.block in self._members:
            self._told.add(info.block)
            self._cond.notify_all()
        raise ConfigError(f"the federation cannot start: {self.refusal}")

    def _check_federation(self, info: PartyInfo) -> None:
        """`_check`; while the parties gather, its refusal of a party new to the federation is a
        refusal of the whole federation. Not so a duplicate holder of a block or an id (that
        party alone is wrong), nor a registered block registering again with other data (its
        registered process still holds the block)."""
        try:
            self._check(info)
        except AlreadyExistsError:
            raise
        except ConfigError as err:
            if self._gathering and info.block not in self._members:
                self.refusal = str(err)
                log.error("registration refused, the federation cannot start: %s", err)
                self._cond.notify_all()
            raise

    def wait_told(self, timeout: float) -> set[int]:
        """After a refusal of the federation: wait up to `timeout` seconds until every
        registered party was told its cause (at its next heartbeat); returns the blocks not told."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (untold := set(self._members) - self._told) and (
                left := deadline - time.monotonic()
            ) > 0:
                self._cond.wait(left)
            return untold

    def _check(self, info: PartyInfo) -> None:
        if info.protocol_version != PROTOCOL_VERSION:
            raise ConfigError(
                f"party {info.party_id} speaks protocol {info.protocol_version}, "
                f"the coordinator speaks {PROTOCOL_VERSION}"
            )
        if info.num_blocks != self.expected:
            raise ConfigError(
                f"party {info.party_id} was prepared for {info.num_blocks} blocks, "
                f"the coordinator expects {self.expected}"
            )
        others = [m.info for m in self._members.values() if m.info.block != info.block]
        found = disagreement([info, *others])
        if found is not None:
            name, _, other = found
            raise ConfigError(
                f"party {info.party_id} has {name}={getattr(info, name)!r} but "
                + _holders(others, name)
                + mismatch_hint(name, info, other)
                + _class_hint(name, [info, *others])
            )
        for other in others:
            if other.party_id == info.party_id:
                raise AlreadyExistsError(
                    f"party id {info.party_id!r} already holds block {other.block}"
                )

    def members(self) -> dict[int, Member]:
        with self._cond:
            return dict(sorted(self._members.items()))

    def member(self, block: int) -> Member | None:
        with self._cond:
            return self._members.get(block)

    def wait(self, count: int, quorum: int | None, timeout: float) -> dict[int, Member]:
        """Wait for `count` parties; after `timeout`, settle for `quorum` if given."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._synced() < count:
                if self.refusal is not None:
                    raise ConfigError(f"the federation cannot start: {self.refusal}")
                left = deadline - time.monotonic()
                if left <= 0:
                    have = self._synced()
                    if quorum is not None and have >= quorum:
                        log.warning("starting with a quorum of %d of %d parties", have, count)
                        break
                    raise ConfigError(
                        f"only {have} of {count} parties registered within {timeout:.0f}s"
                    )
                self._cond.wait(min(left, 1.0))
            self._gathering = False
            return dict(sorted(self._members.items()))

    def heard(self, block: int) -> int:
        """How many registrations (heartbeats included) of `block` were admitted so far."""
        with self._cond:
            return self._heard.get(block, 0)

    def wait_heard(self, heard: Mapping[int, int], timeout: float) -> None:
        """Wait up to `timeout` seconds for a block of `heard` (block -> `heard(block)` before)
        to register again, synchronised: a heartbeat, or a new process that rolled back."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(self._heard_since(b, n) for b, n in heard.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def heard_since(self, block: int, heard: int) -> bool:
        """Whether `block` registered again, synchronised, since `heard(block)` was `heard`."""
        with self._cond:
            return self._heard_since(block, heard)

    def _heard_since(self, block: int, heard: int) -> bool:
        member = self._members.get(block)
        return member is not None and member.synced and self._heard.get(block, 0) != heard

    def _synced(self) -> int:
        return sum(m.synced for m in self._members.values())


def _holders(infos: list[PartyInfo], name: str) -> str:
    """ "party0 and party2 have 2, party3 has 3": every registered party's value of `name`."""
    groups: dict[str, list[str]] = {}
    for info in sorted(infos, key=lambda i: i.block):
        groups.setdefault(repr(getattr(info, name)), []).append(info.party_id)
    return ", ".join(
        f"parties {' and '.join(ids)} have {value}"
        if len(ids) > 1
        else f"party {ids[0]} has {value}"
        for value, ids in groups.items()
    )


def _class_hint(name: str, infos: list[PartyInfo]) -> str:
    """Label parties that count classes differently: a stray label value is the usual cause."""
    labelled = [i for i in infos if i.has_labels]
    if name != "num_classes" or len({i.num_classes for i in labelled}) < 2:
        return ""
    return (
        "; label parties disagree on their classes: each lists the classes it found, with the "
        "rows of each, when it starts (a stray label value makes a class of its own)"
    )
