"""Which parties may join, for which blocks, and under which identity.

With mutual TLS the identity is the common name of the party's certificate (vfl_wire.security):
a registration must name exactly that party id, in its header and in its PartyInfo, so no party
can register (or act) for another. The admitted parties come from `--parties` or the config file
(`parties: {party0: [0], party1: [1, 2]}`), and default to every party `vfl certs` gave a token,
each pinned to the blocks `vfl certs` wrote for it (coordinator/blocks.json: its place in
`--parties`, or the blocks named there), so no party takes another's block. The registry then
keeps each block to one party at a time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vfl_core.errors import ConfigError
from vfl_core.protocol import PartyInfo
from vfl_wire.convert import clip
from vfl_wire.security import BLOCKS_FILE, OPERATOR, TOKENS_FILE, Security, load_token_digests
from vfl_wire.status import PermissionError_

log = logging.getLogger(__name__)

Allowed = Mapping[str, list[int] | None]  # party id -> blocks it may hold (None: any)


def parse_parties(text: str) -> dict[str, list[int] | None]:
    """`party0,party1:1,party2:2+3` -> {party0: None, party1: [1], party2: [2, 3]}."""
    out: dict[str, list[int] | None] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, blocks = item.partition(":")
        if not name or name in out:
            raise ConfigError(f"--parties: empty or repeated party id in {text!r}")
        try:
            out[name] = [int(b) for b in blocks.split("+")] if blocks else None
        except ValueError:
            raise ConfigError(
                f"--parties: {item!r}: blocks must be integers like 0 or 1+2"
            ) from None
    if not out:
        raise ConfigError("--parties: no party ids given")
    return out


@dataclass(frozen=True)
class Admission:
    parties: Allowed | None  # None: anyone (plaintext without --parties)

    def check(self, info: PartyInfo, header_party: str, peer: str | None) -> None:
        """Refuse (PERMISSION_DENIED) a registration that is not this peer's to make."""
        if peer is not None and info.party_id != peer:
            raise PermissionError_(
                f"registration as {info.party_id!r} over the certificate of {peer!r}"
            )
        if header_party and header_party != info.party_id:
            raise PermissionError_(
                f"header names party {clip(header_party)} but the registration is for "
                f"{info.party_id!r}"
            )
        if self.parties is None:
            return
        if info.party_id not in self.parties:
            raise PermissionError_(f"party {info.party_id!r} is not admitted to this federation")
        blocks = self.parties[info.party_id]
        if blocks is not None and info.block not in blocks:
            raise PermissionError_(
                f"party {info.party_id!r} may hold block(s) {', '.join(map(str, blocks))}, "
                f"not {info.block}"
            )

    @property
    def names(self) -> set[str]:
        return set(self.parties or ())


def admission_for(parties: Allowed | None, security: Security) -> Admission:
    """The configured parties, or (with TLS) every party that `vfl certs` gave a token."""
    if parties is not None:
        if OPERATOR in parties:
            raise ConfigError(f"--parties: {OPERATOR!r} is the operator's identity, not a party")
        return Admission(dict(parties))
    if security.identity is None:
        log.warning("no --parties: any process that reaches the coordinator may register")
        return Admission(None)
    tokens = load_token_digests(Path(security.identity.directory) / TOKENS_FILE)
    names = sorted(n for n in tokens if n != OPERATOR)
    if not names:
        raise ConfigError("no party tokens in tokens.json: run `vfl certs --parties ...`")
    pins = load_pins(Path(security.identity.directory) / BLOCKS_FILE)
    allowed = {n: pins.get(n) for n in names}
    log.info(
        "admitting the parties with certificates and tokens, each to its blocks: %s",
        ", ".join(f"{n} -> {'+'.join(map(str, b)) if b else 'any'}" for n, b in allowed.items()),
    )
    return Admission(allowed)


def load_pins(path: Path) -> dict[str, list[int]]:
    """coordinator/blocks.json of `vfl certs` (party id -> the blocks it may hold); {} without
    one (certificates made before it existed: any party may take any free block)."""
    if not path.is_file():
        log.warning("no %s: a party may register for any free block (run `vfl certs` again)", path)
        return {}
    try:
        raw = json.loads(path.read_text())
        return {str(name): [int(b) for b in blocks] for name, blocks in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise ConfigError(f"{path}: not a mapping of party ids to block lists ({err})") from None
