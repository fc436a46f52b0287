"""Who may keep its own tower exact (TrainConfig.fresh_own_tower; EmbedCall.fresh_own), and what
a party records of the option (EmbedCall.own_tower).

The federation resolves the option (vfl_core.auto_rounds.own_tower), as only it knows how many
label parties there are, and says it in its training Embed calls to the one label party: a
party's own copy of the config cannot tell it. A party takes it only under staleness and with
labels; any other such call is a federation out of step, refused before anything changes.

Every training Embed call also says the option as the federation resolved it; a party told it
unset (which resolved it as for one label party) records that in its copy of the config, so that
its checkpoints say what ran (off with several label parties).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vfl_core.errors import ProtocolError
from vfl_core.methods.party_port import PartyPort
from vfl_core.protocol import EmbedCall

if TYPE_CHECKING:
    from vfl_core.methods.spec import RunConfig

log = logging.getLogger(__name__)

# The config fields a party records from the federation's calls (LEARNED where told unset)
LEARNED = ("fresh_own_tower",)


def taken(party: PartyPort, call: EmbedCall) -> bool:
    """Whether `party` embeds training call `call`'s rows at its Fuse (call.fresh_own), once it
    recorded what the call says of the option (record); a fresh_own it cannot take: a
    ProtocolError."""
    record(party, call.own_tower)
    if not call.fresh_own:
        return False
    if not party.config.staleness:
        why = "trains exact rounds"
    elif not party.data.meta.has_labels:
        why = "holds no labels"
    else:
        return True
    raise ProtocolError(
        f"round {call.round_id}: fresh_own asked of party {party.party_id}, which {why}"
    )


def record(party: PartyPort, said: bool | None) -> None:
    """Keep in `party`'s config the option as the federation resolved it (`said`; None: the
    call does not say), where the party was told it unset. Given, the federation keeps it as
    given or refuses the run: nothing to record."""
    if said is None or party.told.fresh_own_tower is not None:
        return
    if party.config.fresh_own_tower != said:
        log.info("fresh_own_tower: %s, as the federation resolved it", "on" if said else "off")
        party.config = party.config.model_copy(update={"fresh_own_tower": said})


def learned(told: RunConfig) -> tuple[str, ...]:
    """The config fields a party told `told` records from the calls (record): its checkpoints
    may hold them otherwise than a new party's copy of the config."""
    return LEARNED if told.fresh_own_tower is None else ()
