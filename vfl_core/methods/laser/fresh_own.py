"""Who may keep its own tower exact (TrainConfig.fresh_own_tower; EmbedCall.fresh_own).

The federation resolves the option (vfl_core.auto_rounds.own_tower), as only it knows how many
label parties there are, and says it in its training Embed calls to the one label party: a
party's own copy of the config cannot tell it. A party takes it only under staleness and with
labels; any other such call is a federation out of step, refused before anything changes.
"""

from __future__ import annotations

from vfl_core.errors import ProtocolError
from vfl_core.methods.party_port import PartyPort


def taken(party: PartyPort, round_id: int) -> bool:
    """True where `party` may embed round `round_id` at its Fuse; else a ProtocolError."""
    if not party.config.staleness:
        why = "trains exact rounds"
    elif not party.data.meta.has_labels:
        why = "holds no labels"
    else:
        return True
    raise ProtocolError(f"round {round_id}: fresh_own asked of party {party.party_id}, which {why}")
