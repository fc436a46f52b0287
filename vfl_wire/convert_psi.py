"""PSI alignment's messages: points travel as one bytes field, 32 bytes each
(vfl_core.training.psi); see `vfl_wire.convert`."""

from __future__ import annotations

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


def psi_apply_to_proto(call: PsiCall, h: vfl_pb2.Header) -> vfl_pb2.PsiApplyRequest:
    return vfl_pb2.PsiApplyRequest(
        header=h, split=call.split, session=call.session, points=pack(call.points)
    )


def psi_apply_from_proto(req: vfl_pb2.PsiApplyRequest) -> PsiCall:
    return PsiCall(
        split=check_split(req.split, what="psi split"),
        session=check_session(req.session),
        points=_points(req.points, "psi apply points"),
    )


def psi_keys_to_proto(call: PsiCall, h: vfl_pb2.Header) -> vfl_pb2.PsiKeysRequest:
    return vfl_pb2.PsiKeysRequest(
        header=h, split=call.split, session=call.session, keys=pack(call.points)
    )


def psi_keys_from_proto(req: vfl_pb2.PsiKeysRequest) -> PsiCall:
    return PsiCall(
        split=check_split(req.split, what="psi split"),
        session=check_session(req.session),
        points=_points(req.keys, "psi keys"),
    )


def psi_points_to_proto(points: list[bytes]) -> vfl_pb2.PsiPoints:
    return vfl_pb2.PsiPoints(points=pack(points))


def psi_points_from_proto(reply: vfl_pb2.PsiPoints, count: int | None = None) -> list[bytes]:
    """A party's answer: `count` points if the request named how many."""
    return _points(reply.points, "psi points", count)
