"""A latency and bandwidth shaping TCP proxy for the WAN benchmark (this machine has no netem).

A `Link` stands for one party's network path to the coordinator: two directions (`Pipe`s), each
with a one-way delay, a jitter and a bandwidth, shared by every TCP connection over the link. A
link listens on one or more ports of 127.0.0.1 and relays each accepted connection to an upstream
address (the coordinator dials a party through one port, the party dials the coordinator through
another, and both connections share the link's two directions).

How a chunk crosses a pipe: it is put on the wire when the pipe is free and occupies it for
len * 8 / bits_per_s seconds (serialisation), then arrives `delay` +- uniform `jitter` later, never
before a chunk sent earlier (TCP keeps order, so jitter delays but never reorders). The reader
waits while its chunk is being serialised, so a sender sees back-pressure as from a slow link;
the propagation delay is pipelined (many chunks may be in flight).

`NetShaper` runs links on one asyncio loop in a background thread; the benchmark reshapes them
while they run (`set_shape`) and reads the bytes each direction carried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

CHUNK = 64 * 1024  # bytes read at once: at 100 Mbit/s one chunk is on the wire for 5.2 ms
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Shape:
    """One direction of a link."""

    delay_s: float = 0.0  # one-way propagation delay
    jitter_s: float = 0.0  # each chunk's delay is delay_s + uniform(-jitter_s, +jitter_s), >= 0
    bits_per_s: float | None = None  # None: unlimited

    @classmethod
    def of(cls, rtt_ms: float, mbit_per_s: float | None, jitter_ms: float = 0.0) -> Shape:
        """A direction of a symmetric link with this round-trip time (half of it each way)."""
        return cls(
            delay_s=rtt_ms / 2000,
            jitter_s=jitter_ms / 1000,
            bits_per_s=None if mbit_per_s is None else mbit_per_s * 1e6,
        )


class Pipe:
    """One direction of a link: when each chunk leaves and arrives, and the bytes carried."""

    def __init__(self, shape: Shape, seed: int) -> None:
        self.shape = shape
        self.bytes = 0
        self._rng = random.Random(seed)
        self._free_at = 0.0  # the wire is busy serialising until then
        self._last_arrival = 0.0

    def schedule(self, now: float, size: int) -> tuple[float, float]:
        """(when the chunk has left the sender, when it arrives) for `size` bytes sent at `now`."""
        shape = self.shape
        start = max(now, self._free_at)
        sent = start + (size * 8 / shape.bits_per_s if shape.bits_per_s else 0.0)
        self._free_at = sent
        delay = shape.delay_s
        if shape.jitter_s:
            delay += self._rng.uniform(-shape.jitter_s, shape.jitter_s)
        arrival = max(sent + max(delay, 0.0), self._last_arrival)
        self._last_arrival = arrival
        self.bytes += size
        return sent, arrival


class Link:
    """Two pipes (`out`: from the dialer of a `listen` port towards its upstream, `back`: the
    replies) and the ports that relay through them."""

    def __init__(self, shape: Shape, seed: int = 0) -> None:
        self.pipes = (Pipe(shape, seed * 2), Pipe(shape, seed * 2 + 1))
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    def set_shape(self, shape: Shape) -> None:
        for pipe in self.pipes:
            pipe.shape = shape

    async def listen(self, upstream: tuple[str, int], reverse: bool = False) -> int:
        """Relay connections accepted on a free port of 127.0.0.1 to `upstream`; returns the
        port. `reverse`: the dialer sits at the other end of the link (it sends through `back`)."""
        out, back = self.pipes[::-1] if reverse else self.pipes

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                await self._connect(reader, writer, upstream, out, back)
            finally:
                self._tasks.discard(task)

        server = await asyncio.start_server(accept, HOST, 0)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _connect(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: tuple[str, int],
        out: Pipe,
        back: Pipe,
    ) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
        except OSError as err:  # nothing listens there (yet): the dialer sees a reset
            log.debug("upstream %s:%d unreachable: %s", *upstream, err)
            writer.close()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        try:
            await asyncio.gather(_relay(reader, up_writer, out), _relay(up_reader, writer, back))
        finally:
            for w in (writer, up_writer):
                w.close()
                self._writers.discard(w)

    async def close(self) -> None:
        """Stop listening and cut every connection (both ends see the connection close)."""
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pipe: Pipe) -> None:
    """Copy `reader` to `writer` through `pipe` until EOF, then half-close `writer`."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
    deliver = asyncio.create_task(_deliver(queue, writer))
    try:
        while not deliver.done() and (data := await reader.read(CHUNK)):
            sent, arrival = pipe.schedule(loop.time(), len(data))
            queue.put_nowait((arrival, data))
            if sent > loop.time():  # the sender waits while its chunk is serialised
                await asyncio.sleep(sent - loop.time())
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait(None)  # end of stream, after the chunks still in flight
        with contextlib.suppress(ConnectionError, OSError):
            await deliver


async def _deliver(queue: asyncio.Queue[tuple[float, bytes] | None], writer: Any) -> None:
    loop = asyncio.get_running_loop()
    while (item := await queue.get()) is not None:
        arrival, data = item
        if arrival > loop.time():
            await asyncio.sleep(arrival - loop.time())
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof() and not writer.is_closing():
        writer.write_eof()


class NetShaper:
    """Links on one asyncio loop in a background thread; use as a context manager."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netshape", daemon=True)
        self.links: list[Link] = []

    def __enter__(self) -> NetShaper:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def link(self, shape: Shape, seed: int = 0) -> Link:
        link = Link(shape, seed)
        self.links.append(link)
        return link

    def listen(self, link: Link, upstream: tuple[str, int], reverse: bool = False) -> int:
        """A port of 127.0.0.1 whose connections `link` relays to `upstream`."""
        return self._run(link.listen(upstream, reverse))

    def set_shape(self, shape: Shape) -> None:
        """Reshape every link (takes effect for chunks read from now on)."""
        self._loop.call_soon_threadsafe(lambda: [k.set_shape(shape) for k in self.links])

    def bytes(self) -> int:
        """Bytes carried by every link, both directions."""
        return sum(p.bytes for k in self.links for p in k.pipes)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            for link in self.links:
                self._run(link.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()


def free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago (for a process that must be told its
    port before it starts; the race with other processes is accepted in benchmarks)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])
