"""The stdin reader: the event loop reads a pipe itself (a regular file falls back to pygls' thread-pool reader),
frames messages and notes when each arrived; the writer notes when each answer was handed to the OS."""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
import threading
import time

from pygls.io_ import StdinAsyncReader, run_async

from dg_lsp.stdio import Arrivals, PipeReader, TimedWriter, pipe_reader


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


class Recorder:
    """The protocol side of pygls' message loop: records each message with the arrival time the reader gave it."""

    def __init__(self) -> None:
        self.arrived_at = None
        self.seen: list[tuple[object, float]] = []

    def structure_message(self, data):
        return data

    def handle_message(self, message) -> None:
        self.seen.append((message, self.arrived_at))


def test_messages_are_framed_and_timed_before_they_are_parsed():
    async def main() -> tuple:
        r, w = os.pipe()
        proto = Recorder()
        with os.fdopen(r, "rb", buffering=0) as f:
            reader = await pipe_reader(f, proto)
            task = asyncio.ensure_future(run_async(threading.Event(), reader, proto))
            os.write(w, frame(b'{"a": 1}') + b"X-Unknown-Header: 1\r\n" + frame(b'{"b": 2}'))
            while len(proto.seen) < 2:
                await asyncio.sleep(0.001)
            first_chunk = time.perf_counter()
            await asyncio.sleep(0.02)
            os.write(w, b"Content-Type: x\r\n\r\n")  # a header block with no Content-Length: skipped
            os.write(w, frame(b'{"c": 3}')[:10])  # a message in two chunks: it arrives with its last byte
            await asyncio.sleep(0.02)
            last_part = time.perf_counter()
            os.write(w, frame(b'{"c": 3}')[10:])
            os.close(w)
            await asyncio.wait_for(task, 5)  # EOF ends the loop
        return proto.seen, first_chunk, last_part

    seen, first_chunk, last_part = asyncio.run(main())
    assert [m for m, _ in seen] == [{"a": 1}, {"b": 2}, {"c": 3}]
    (_, t_a), (_, t_b), (_, t_c) = seen
    assert t_a == t_b < first_chunk  # one chunk, one arrival
    assert t_c > last_part  # not when its first bytes came


def test_arrivals_forget_chunks_before_the_asked_offset():
    a = Arrivals()
    a.received(10)
    a.received(5)
    t1, t2 = (t for _, t in a._chunks)
    assert a.at(3) == t1 and a.at(10) == t1 and a.at(11) == t2 and a.at(15) == t2
    assert a.at(16) is None and a.at(3) is None  # all forgotten


def test_timed_writer_notes_the_hand_over_within_the_write():
    buf = io.BytesIO()
    w = TimedWriter(buf)
    t0 = time.perf_counter()
    w.write(b"x" * 100)
    assert buf.getvalue() == b"x" * 100
    assert t0 <= w.handed_at <= time.perf_counter()


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body
