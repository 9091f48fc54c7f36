"""LSP over stdio: the event loop reads stdin itself and notes when each message arrived.

pygls 2 reads stdin through a thread pool: every header line and every body is one `run_in_executor` call, so each
message costs three or four thread hand-offs before its handler runs (two messages per keystroke). An asyncio pipe
transport lets the loop's selector read instead; a message already in the buffer is parsed with no hand-off at all.
Falls back to a thread pool when the loop's selector cannot watch stdin (a regular file, or /dev/null: epoll refuses
it with EPERM, which asyncio would only raise later, in a callback, leaving the loop waiting forever). The bytes go
through dg_lsp.wire.transport's message loop.

Timing (what the server reports as its own time per keystroke, see `DgServer.after_response`):
- a message *arrives* when the loop receives the chunk of bytes that completes it (`Arrivals`), before it is
  parsed; with the thread-pool reader, when it is handled (`Dispatcher.receive`);
- an answer is *out* when `TimedWriter` has handed it to the OS: the start of the write plus the CPU time the write
  itself took. Writing to a pipe wakes the client, and the kernel often runs the client at once on this process's
  CPU; the wall time of the write then holds the client's own work (`bench.lsp_latency` shows the difference on a
  machine with few cores).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import selectors
import sys
import time
from typing import Any, BinaryIO

from dg_lsp.wire.transport import CHUNK, serve_messages

log = logging.getLogger(__name__)


class Arrivals:
    """When the loop received each chunk of stdin: `at(end)` is the time the byte before stream offset `end` came."""

    def __init__(self) -> None:
        self._chunks: collections.deque[tuple[int, float]] = collections.deque()  # (stream offset after it, time)
        self.total = 0
        self.last = 0.0  # when the latest chunk came, parsed or not (the background reparse waits for quiet)

    def received(self, n: int) -> None:
        self.total += n
        self.last = time.perf_counter()
        self._chunks.append((self.total, self.last))

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
    """Chunks of a pipe as the event loop receives them (`read`: b"" at EOF), each timed in `arrivals`."""

    def __init__(self, stream: asyncio.StreamReader, arrivals: Arrivals) -> None:
        self.stream = stream
        self.arrivals: Arrivals | None = arrivals

    async def read(self) -> bytes:
        return await self.stream.read(CHUNK)


class ThreadReader:
    """Chunks of a file that is not a pipe, read through the loop's thread pool (messages are then timed when
    they are handled)."""

    arrivals: Arrivals | None = None

    def __init__(self, stdin: BinaryIO) -> None:
        self._read = getattr(stdin, "read1", stdin.read)

    async def read(self) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(None, self._read, CHUNK)


def selectable(stdin: BinaryIO) -> bool:
    """Whether the event loop's selector can watch `stdin` (asyncio's pipe transport registers it only in a
    callback after `connect_read_pipe` returned, where a refusal is logged, not raised)."""
    probe = selectors.DefaultSelector()
    try:
        probe.register(stdin.fileno(), selectors.EVENT_READ)
    except (OSError, ValueError):
        return False
    finally:
        probe.close()
    return True


async def pipe_reader(stdin: BinaryIO) -> PipeReader | ThreadReader:
    """A reader of `stdin` driven by the event loop, or through a thread pool when that is not possible."""
    if sys.platform == "win32":  # the proactor loop reads overlapped handles only, not an inherited stdin pipe
        return ThreadReader(stdin)
    if not selectable(stdin):
        log.info("stdin is read through a thread pool: the event loop cannot watch it")
        return ThreadReader(stdin)
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=CHUNK)
    arrivals = Arrivals()
    try:
        await loop.connect_read_pipe(lambda: _TimedStreamProtocol(stream, arrivals), stdin)
    except (ValueError, OSError) as e:  # a regular file, or a platform without pipe transports
        log.info("stdin is read through a thread pool: %s", e)
        return ThreadReader(stdin)
    return PipeReader(stream, arrivals)


class TimedWriter:
    """A stdout writer that notes when each write handed its bytes to the OS (`handed_at`, see above). Once
    closed (on `exit`), writes are dropped: work cancelled by the exit (a command's progress end) still sends as
    it unwinds, and the client has stopped reading."""

    handed_at = 0.0

    def __init__(self, stdout: BinaryIO) -> None:
        self._stdout = stdout

    def close(self) -> None:
        self._stdout.close()

    def write(self, data: bytes) -> None:
        if self._stdout.closed:
            log.debug("dropped %d bytes written after the stream was closed", len(data))
            return
        t0, cpu0 = time.perf_counter(), time.thread_time()
        self._stdout.write(data)
        self._stdout.flush()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        self.handed_at = t0 + min(cpu, wall)  # min: thread_time is coarse on some platforms


def serve_stdio(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serve `server` (dg_lsp.server.Server) on stdin/stdout (dg_lsp.wire.transport's loop, `pipe_reader`,
    `TimedWriter`) until the client exits or the stream ends. Returns LSP's exit code: 0 after `shutdown`, else
    1."""
    server.client.set_writer(TimedWriter(stdout or sys.stdout.buffer))

    received = 0

    async def main() -> int:
        reader = await pipe_reader(stdin or sys.stdin.buffer)

        async def read() -> bytes:
            nonlocal received
            data = await reader.read()
            received += len(data)
            return data

        return await serve_messages(read, server.dispatcher, reader.arrivals)

    try:
        code = asyncio.run(main())
        if server.dispatcher.exit_code is None and not server.dispatcher.shut_down:
            log.warning("%s: exiting with 1", "the input ended before shutdown" if received else
                        "the input was empty (dg-lsp speaks LSP on stdin and stdout: an editor starts it)")
        return code
    except BrokenPipeError:
        log.error("connection to the client lost: shutting down")
        return 1
    except KeyboardInterrupt:
        return 1
    finally:
        server.shutdown()
