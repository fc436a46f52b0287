"""PSI alignment's messages: points travel as one bytes field, 32 bytes each
(vfl_core.training.psi); see `vfl_wire.convert`."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from vfl_core.errors import ProtocolError
from vfl_core.protocol import PsiCall
from vfl_core.training.psi import POINT_BYTES, check_session, pack, unpack
from vfl_wire.convert_fields import check_split
from vfl_wire.v1 import vfl_pb2

MAX_PSI_POINTS = 2**22  # 128 MiB of points: the message cap (vfl_wire.channels) bounds it anyway


def _points(blob: bytes, what: str, count: int | None = None) -> list[bytes]:
    if len(blob) > MAX_PSI_POINTS * POINT_BYTES:
        raise ProtocolError(f"{what}: more than {MAX_PSI_POINTS} points")
    return unpack(blob, what, count)


def psi_blind_request(split: str, session: str, h: vfl_pb2.Header) -> vfl_pb2.PsiBlindRequest:
    return vfl_pb2.PsiBlindRequest(header=h, split=split, session=session)


def psi_blind_from_proto(req: vfl_pb2.PsiBlindRequest) -> tuple[str, str]:
    """(split, session)."""
    return check_split(req.split, what="psi split"), check_session(req.session)


@dataclass(frozen=True)
class PsiCallMessage:
    """A request that carries a PsiCall: its message type and the bytes field of its points;
    both directions are derived from these (PSI's Apply and Keys differ in nothing else)."""

    message: type[vfl_pb2.PsiApplyRequest] | type[vfl_pb2.PsiKeysRequest]
    field: str
    what: str  # how errors name the points

    def to_proto(self, call: PsiCall, h: vfl_pb2.Header) -> Message:
        points = {self.field: pack(call.points)}
        return self.message(header=h, split=call.split, session=call.session, **points)

    def from_proto(self, req: vfl_pb2.PsiApplyRequest | vfl_pb2.PsiKeysRequest) -> PsiCall:
        return PsiCall(
            split=check_split(req.split, what="psi split"),
            session=check_session(req.session),
            points=_points(getattr(req, self.field), self.what),
        )


PSI_APPLY = PsiCallMessage(vfl_pb2.PsiApplyRequest, "points", "psi apply points")
PSI_KEYS = PsiCallMessage(vfl_pb2.PsiKeysRequest, "keys", "psi keys")
psi_apply_to_proto, psi_apply_from_proto = PSI_APPLY.to_proto, PSI_APPLY.from_proto
psi_keys_to_proto, psi_keys_from_proto = PSI_KEYS.to_proto, PSI_KEYS.from_proto


def psi_points_to_proto(points: list[bytes]) -> vfl_pb2.PsiPoints:
    return vfl_pb2.PsiPoints(points=pack(points))


def psi_points_from_proto(reply: vfl_pb2.PsiPoints, count: int | None = None) -> list[bytes]:
    """A party's answer: `count` points if the request named how many."""
    return _points(reply.points, "psi points", count)
