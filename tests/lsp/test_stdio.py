"""The stdin reader: the event loop reads a pipe itself; a regular file falls back to pygls' thread-pool reader."""

from __future__ import annotations

import asyncio
import os
import tempfile

from pygls.io_ import StdinAsyncReader

from dg_lsp.stdio import PipeReader, pipe_reader


def test_pipe_is_read_by_the_loop_and_eof_gives_what_there_is():
    async def main() -> tuple:
        r, w = os.pipe()
        os.write(w, b"Content-Length: 2\r\n\r\n{}" + b"tail")
        os.close(w)
        with os.fdopen(r, "rb", buffering=0) as f:
            reader = await pipe_reader(f)
            out = (type(reader), await reader.readline(), await reader.readline(), await reader.readexactly(2),
                   await reader.readexactly(10), await reader.readexactly(3), await reader.readline())
        return out

    kind, header, blank, body, rest, empty, eof = asyncio.run(main())
    assert kind is PipeReader
    assert (header, blank, body) == (b"Content-Length: 2\r\n", b"\r\n", b"{}")
    assert rest == b"tail" and empty == b"" and eof == b""  # pygls' loop stops on an empty read


def test_a_regular_file_falls_back_to_the_thread_pool_reader():
    async def main() -> tuple:
        with tempfile.TemporaryFile() as f:
            f.write(b"Content-Length: 2\r\n\r\n{}")
            f.seek(0)
            reader = await pipe_reader(f)
            return type(reader), await reader.readline()

    kind, line = asyncio.run(main())
    assert kind is StdinAsyncReader and line == b"Content-Length: 2\r\n"
