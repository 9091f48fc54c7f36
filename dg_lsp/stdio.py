"""LSP over stdio: the event loop reads stdin itself and notes when each message arrived.

pygls 2 reads stdin through a thread pool: every header line and every body is one `run_in_executor` call, so each
message costs three or four thread hand-offs before its handler runs (measured here: about half a millisecond per
message, two messages per keystroke). An asyncio pipe transport lets the loop's selector read instead; a message
already in the buffer is parsed with no hand-off at all. Falls back to pygls' reader when stdin is not a pipe,
socket or character device (e.g. a regular file).

Timing (what the server reports as its own time per keystroke, see `DgServer.after_response`):
- a message *arrives* when the loop receives the chunk of bytes that completes it (`Arrivals`), before it is
  parsed; with the thread-pool reader, when its body has been read;
- an answer is *out* when `TimedWriter` has handed it to the OS: the start of the write plus the CPU time the write
  itself took. Writing to a pipe wakes the client, and the kernel often runs the client at once on this process's
  CPU; the wall time of the write then holds the client's own work (0.6 ms p50 in `bench.lsp_latency` on a 2-core
  machine, against 0.035 ms with the two processes on different CPUs).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from pygls.exceptions import JsonRpcException
from pygls.io_ import StdinAsyncReader, StdoutWriter

log = logging.getLogger(__name__)

_CONTENT_LENGTH = re.compile(rb"^content-length:\s*(\d+)\s*$", re.IGNORECASE)


class Arrivals:
    """When the loop received each chunk of stdin: `at(end)` is the time the byte before stream offset `end` came."""

    def __init__(self) -> None:
        self._chunks: collections.deque[tuple[int, float]] = collections.deque()  # (stream offset after it, time)
        self.total = 0

    def received(self, n: int) -> None:
        self.total += n
        self._chunks.append((self.total, time.perf_counter()))

    def at(self, end: int) -> float | None:
        """The arrival of the chunk holding the byte before offset `end`; chunks wholly before it are forgotten."""
        chunks = self._chunks
        while chunks and chunks[0][0] < end:
            chunks.popleft()
        return chunks[0][1] if chunks else None


class _TimedStreamProtocol(asyncio.StreamReaderProtocol):
    def __init__(self, stream: asyncio.StreamReader, arrivals: Arrivals) -> None:
        super().__init__(stream)
        self._arrivals = arrivals

    def data_received(self, data: bytes) -> None:
        self._arrivals.received(len(data))
        super().data_received(data)


class PipeReader:
    """pygls' AsyncReader over an asyncio StreamReader: `readexactly` returns what there is at EOF (b"" when
    nothing), as pygls' loop expects, instead of raising. `arrivals` times the chunks the loop received."""

    def __init__(self, stream: asyncio.StreamReader, arrivals: Arrivals | None = None) -> None:
        self.stream = stream
        self.arrivals = arrivals

    async def readline(self) -> bytes:
        return await self.stream.readline()

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self.stream.readexactly(n)
        except asyncio.IncompleteReadError as e:
            return e.partial


async def pipe_reader(stdin: BinaryIO) -> Any:
    """A reader of `stdin` driven by the event loop, or pygls' thread-pool reader when that is not possible."""
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=1 << 20)  # the longest header line we accept
    arrivals = Arrivals()
    try:
        await loop.connect_read_pipe(lambda: _TimedStreamProtocol(stream, arrivals), stdin)
    except (ValueError, OSError) as e:  # a regular file, or a platform without pipe transports
        log.info("stdin is read through a thread pool: %s", e)
        return StdinAsyncReader(stdin)
    return PipeReader(stream, arrivals)


async def read_messages(reader: Any, protocol: Any, stop: threading.Event,
                        error_handler: Callable[[Exception, type], Any] | None = None) -> None:
    """pygls' message loop (`pygls.io_.run_async`: header lines until a blank one, then a Content-Length body; a
    header block without Content-Length is skipped), which also sets `protocol.arrived_at` before each message is
    parsed."""
    arrivals: Arrivals | None = getattr(reader, "arrivals", None)
    offset = 0  # stream offset after the last byte read
    length = 0
    while not stop.is_set():
        header = await reader.readline()
        if not header:
            break
        offset += len(header)
        if not length and (m := _CONTENT_LENGTH.match(header)):
            length = int(m.group(1))
        if not (length and not header.strip()):
            continue
        body = await reader.readexactly(length)
        if not body:
            break
        offset += len(body)
        length = 0
        arrived = arrivals.at(offset) if arrivals is not None else None
        protocol.arrived_at = arrived if arrived is not None else time.perf_counter()
        try:
            protocol.handle_message(json.loads(body, object_hook=protocol.structure_message))
        except Exception as exc:
            log.exception("Unable to handle message")
            if error_handler is not None:
                error_handler(exc, JsonRpcException)


class TimedWriter(StdoutWriter):
    """pygls' stdout writer that notes when each write handed its bytes to the OS (`handed_at`, see above)."""

    handed_at = 0.0

    def write(self, data: bytes) -> None:
        t0, cpu0 = time.perf_counter(), time.thread_time()
        super().write(data)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        self.handed_at = t0 + min(cpu, wall)  # min: thread_time is coarse on some platforms


def serve_stdio(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """What pygls' `start_io` does, with `pipe_reader` for stdin, `read_messages` and `TimedWriter`."""
    server._stop_event = threading.Event()
    server.protocol.set_writer(TimedWriter(stdout or sys.stdout.buffer))

    async def main() -> None:
        reader = await pipe_reader(stdin or sys.stdin.buffer)
        await read_messages(reader, server.protocol, server._stop_event, server.report_server_error)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("connection to the client lost: shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
