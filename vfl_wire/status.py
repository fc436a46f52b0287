"""Map the project's errors to gRPC status codes, in one place for both servers."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import grpc

from vfl_core.errors import ConfigError, ProtocolError, StaleRoundError, VflError
from vfl_wire.log_budget import budget

# peers cause its warnings, one per refused request: a flood must not fill the disk
log = budget(logging.getLogger(__name__))


class PermissionError_(ProtocolError):
    """A message names another run or party than the receiver serves."""


class AlreadyExistsError(ConfigError):
    """A registration for a block that another party already holds."""


class FencedError(ConfigError):
    """A registration quoting a lease that is no longer the block's: another process of the same
    party registered since (vfl_coordinator.registry). ABORTED: the older process must stop."""


def status_for(err: BaseException) -> grpc.StatusCode:
    if isinstance(err, FencedError):
        return grpc.StatusCode.ABORTED
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


# An error reply (and its log line) quotes at most this much: whatever a hostile message made the
# error say, it cannot fill the server's log or the caller's metadata limit.
MAX_DETAIL_CHARS = 1000


def detail(err: BaseException) -> str:
    text = str(err)
    if len(text) <= MAX_DETAIL_CHARS:
        return text
    return f"{text[:MAX_DETAIL_CHARS]}... ({len(text)} characters)"


@contextlib.contextmanager
def rpc_errors(context: grpc.ServicerContext, rpc: str) -> Iterator[None]:
    """Refuse a bad request with a status code and a message naming the problem; never crash."""
    try:
        yield
    except VflError as err:
        message = detail(err)
        log.warning("%s refused: %s", rpc, message)
        context.abort(status_for(err), message)
    except Exception:
        log.exception("%s failed", rpc)
        context.abort(grpc.StatusCode.INTERNAL, f"{rpc}: internal error (see the server's log)")
