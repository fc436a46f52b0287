"""Message audit: record every request and response that crosses a gRPC channel or server.

The coordinator relays all traffic of the federation (parties only talk to it), so a client
interceptor on its channels to the parties plus a server interceptor on its own server see every
message. Each message is appended to one file as it passes, so a test or an auditor can check
afterwards what left each party (raw features, raw IDs and labels must never appear).

File format: the magic line `VFLAUDIT1\\n`, then records, each a big-endian uint32 length N
followed by N bytes:

    uint8  direction   0 request, 1 response, 2 error (status code and details, UTF-8)
    uint8  side        0 client (coordinator -> party call), 1 server (call to the coordinator)
    uint64 time_ns     wall clock when the record was written
    uint16 M           length of the method name
    M bytes            full method name, e.g. "/vfl.v1.Party/Embed"
    rest               the serialized message (protobuf wire format) or the error text

Records are flushed one by one; a crash can at most tear the last record, which `read_audit`
reports. Serialization is done again for the audit (an extra copy per message): keep it off in
production unless you need it. Only unary-unary methods are recorded (all of the federation's);
streaming methods such as health Watch pass through untouched.
"""

from __future__ import annotations

import functools
import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import Message

from vfl_core.errors import DataError
from vfl_wire.v1 import vfl_pb2  # noqa: F401  (registers vfl.v1 in the default descriptor pool)

log = logging.getLogger(__name__)

MAGIC = b"VFLAUDIT1\n"
Direction = Literal["request", "response", "error"]
Side = Literal["client", "server"]
_DIRECTIONS: tuple[Direction, ...] = ("request", "response", "error")
_SIDES: tuple[Side, ...] = ("client", "server")
_LENGTH = struct.Struct(">I")
_FIXED = struct.Struct(">BBQH")


@dataclass(frozen=True)
class AuditRecord:
    method: str  # "/package.Service/Method"
    direction: Direction
    side: Side
    time_ns: int
    data: bytes  # serialized message, or "CODE: details" for an error

    @property
    def rpc(self) -> str:
        """The short method name, e.g. "Embed"; for the generic Step of a method, the name of
        the step it carries (e.g. "GuestStep"), which requests and replies both name."""
        name = self.method.rsplit("/", 1)[-1]
        if name == "Step" and self.direction != "error":
            return str(getattr(self.message(), "step", "")) or name
        return name

    @property
    def service(self) -> str:
        """The full service name, e.g. "vfl.v1.Party"."""
        return self.method.strip("/").split("/", 1)[0]

    def message(self) -> Message:
        """The recorded message, parsed with its request or response type."""
        if self.direction == "error":
            raise ValueError(f"{self.method}: an error record holds no message")
        parsed = message_class(self.method, self.direction)()
        parsed.ParseFromString(self.data)
        return parsed


def message_class(method: str, direction: Direction) -> type[Message]:
    """The protobuf class of a method's request or response (from the default pool)."""
    service_name, _, rpc = method.strip("/").partition("/")
    service = descriptor_pool.Default().FindServiceByName(service_name)
    desc = service.FindMethodByName(rpc)
    return message_factory.GetMessageClass(
        desc.input_type if direction == "request" else desc.output_type
    )


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


class AuditLog:
    """An append-only audit file shared by any number of interceptors and threads."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file: BinaryIO | None = self.path.open("ab")
        if self._file.tell() == 0:
            self._file.write(MAGIC)
            self._file.flush()
        self.records = 0
        log.info("auditing every message to %s", self.path)

    def write(self, method: str, direction: Direction, side: Side, data: bytes) -> None:
        name = method.encode("utf-8")
        body = (
            _FIXED.pack(_DIRECTIONS.index(direction), _SIDES.index(side), time.time_ns(), len(name))
            + name
            + data
        )
        with self._lock:
            if self._file is None:
                log.debug("audit closed; dropped %s %s", method, direction)
                return
            self._file.write(_LENGTH.pack(len(body)) + body)
            self._file.flush()
            self.records += 1

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
        log.info("audit log %s closed after %d records", self.path, self.records)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def client_interceptor(self) -> AuditClientInterceptor:
        return AuditClientInterceptor(self)

    def server_interceptor(self) -> AuditServerInterceptor:
        return AuditServerInterceptor(self)


def _method_name(method: str | bytes) -> str:
    return method.decode("utf-8") if isinstance(method, bytes) else method


def _serialize(message: Any) -> bytes:
    return message.SerializeToString() if isinstance(message, Message) else bytes(message)


class AuditClientInterceptor(grpc.UnaryUnaryClientInterceptor):
    """For a channel that calls parties: records each request and the party's reply."""

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit

    def intercept_unary_unary(self, continuation, client_call_details, request):
        method = _method_name(client_call_details.method)
        self._audit.write(method, "request", "client", _serialize(request))
        call = continuation(client_call_details, request)
        call.add_done_callback(functools.partial(self._done, method))
        return call

    def _done(self, method: str, call: grpc.Future) -> None:
        try:
            code = call.code()
            if code == grpc.StatusCode.OK:
                self._audit.write(method, "response", "client", _serialize(call.result()))
            else:
                text = f"{code.name if code else 'UNKNOWN'}: {call.details()}"
                self._audit.write(method, "error", "client", text.encode("utf-8"))
        except Exception:  # never let the audit break a call
            log.exception("audit of %s failed", method)


class AuditServerInterceptor(grpc.ServerInterceptor):
    """For a server: records each request it receives and its reply (or error)."""

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # unknown method or streaming: pass through
        method = _method_name(handler_call_details.method)
        return grpc.unary_unary_rpc_method_handler(
            self._wrap(method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap(self, method: str, behavior: Callable) -> Callable:
        audit = self._audit

        def audited(request, context):
            audit.write(method, "request", "server", _serialize(request))
            try:
                response = behavior(request, context)
            except BaseException:
                audit.write(method, "error", "server", _server_error(context).encode("utf-8"))
                raise
            audit.write(method, "response", "server", _serialize(response))
            return response

        return audited


def _server_error(context: grpc.ServicerContext) -> str:
    code = getattr(context, "code", lambda: None)()
    details = getattr(context, "details", lambda: "")() or ""
    if isinstance(details, bytes):  # the sync server keeps abort details as bytes
        details = details.decode("utf-8", errors="replace")
    name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    return f"{name}: {details}"


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def read_audit(path: Path) -> list[AuditRecord]:
    """Every record of an audit file, in the order written (DataError if corrupt or torn)."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot read audit log: {err.strerror}") from None
    if not blob.startswith(MAGIC):
        raise DataError(f"{path}: not an audit log (bad magic)")
    records: list[AuditRecord] = []
    offset = len(MAGIC)
    while offset < len(blob):
        record, offset = _parse_record(path, blob, offset)
        records.append(record)
    return records


def _parse_record(path: Path, blob: bytes, offset: int) -> tuple[AuditRecord, int]:
    if offset + _LENGTH.size > len(blob):
        raise DataError(f"{path}: torn record length at byte {offset}")
    (length,) = _LENGTH.unpack_from(blob, offset)
    start, end = offset + _LENGTH.size, offset + _LENGTH.size + length
    if length < _FIXED.size or end > len(blob):
        raise DataError(f"{path}: torn or corrupt record at byte {offset} ({length} bytes)")
    direction, side, time_ns, name_len = _FIXED.unpack_from(blob, start)
    name_end = start + _FIXED.size + name_len
    if direction >= len(_DIRECTIONS) or side >= len(_SIDES) or name_end > end:
        raise DataError(f"{path}: corrupt record header at byte {offset}")
    try:
        method = blob[start + _FIXED.size : name_end].decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path}: corrupt method name at byte {offset}") from None
    record = AuditRecord(
        method, _DIRECTIONS[direction], _SIDES[side], time_ns, bytes(blob[name_end:end])
    )
    return record, end
