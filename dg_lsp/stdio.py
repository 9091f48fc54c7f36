"""LSP over stdio with the event loop reading stdin itself.

pygls 2 reads stdin through a thread pool: every header line and every body is one `run_in_executor` call, so each
message costs three or four thread hand-offs before its handler runs (measured here: about half a millisecond per
message, two messages per keystroke). An asyncio pipe transport lets the loop's selector read instead; a message
already in the buffer is parsed with no hand-off at all. Falls back to pygls' reader when stdin is not a pipe,
socket or character device (e.g. a regular file).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Any, BinaryIO

from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async

log = logging.getLogger(__name__)


class PipeReader:
    """pygls' AsyncReader over an asyncio StreamReader: `readexactly` returns what there is at EOF (b"" when
    nothing), as pygls' loop expects, instead of raising."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream

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
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), stdin)
    except (ValueError, OSError) as e:  # a regular file, or a platform without pipe transports
        log.info("stdin is read through a thread pool: %s", e)
        return StdinAsyncReader(stdin)
    return PipeReader(stream)


def serve_stdio(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """What pygls' `start_io` does, with `pipe_reader` for stdin."""
    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))

    async def main() -> None:
        reader = await pipe_reader(stdin or sys.stdin.buffer)
        await run_async(stop_event=server._stop_event, reader=reader, protocol=server.protocol, logger=log,
                        error_handler=server.report_server_error)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("connection to the client lost: shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
