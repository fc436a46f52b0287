"""Map the project's errors to gRPC status codes, in one place for both servers."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import grpc

from vfl_core.errors import ConfigError, ProtocolError, StaleRoundError, VflError

log = logging.getLogger(__name__)


class PermissionError_(ProtocolError):
    """A message names another run or party than the receiver serves."""


class AlreadyExistsError(ConfigError):
    """A registration for a block that another party already holds."""


def status_for(err: BaseException) -> grpc.StatusCode:
    if isinstance(err, PermissionError_):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(err, AlreadyExistsError):
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(err, StaleRoundError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(err, ProtocolError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(err, ConfigError):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


@contextlib.contextmanager
def rpc_errors(context: grpc.ServicerContext, rpc: str) -> Iterator[None]:
    """Refuse a bad request with a status code and a message naming the problem; never crash."""
    try:
        yield
    except VflError as err:
        log.warning("%s refused: %s", rpc, err)
        context.abort(status_for(err), str(err))
    except Exception:
        log.exception("%s failed", rpc)
        context.abort(grpc.StatusCode.INTERNAL, f"{rpc}: internal error (see the server's log)")
