"""Imported at interpreter start when this folder is on PYTHONPATH (tests/service/test_without_unix.py): with
DG_HIDE_UNIX=1 the process sees what Windows offers -- no `socket.AF_UNIX`, no `fcntl`, no glibc (`os.confstr`
knows no CS_GNU_LIBC_VERSION) -- and re-executing itself (the glibc malloc re-exec) fails loudly. Children
inherit the environment, so an auto-started engine service runs hidden too.

`socket.socketpair()` (asyncio's self-pipe) keeps working: Windows has one too (over loopback TCP)."""

import os
import socket
import sys

if os.environ.get("DG_HIDE_UNIX") == "1":
    _pair, _unix = socket.socketpair, socket.AF_UNIX

    def _socketpair(family=None, type=socket.SOCK_STREAM, proto=0):  # noqa: A002 -- socket.socketpair's names
        return _pair(_unix if family is None else family, type, proto)

    def _no_confstr(name):
        raise ValueError(f"unrecognized configuration name: {name}")

    def _no_execve(*args):
        raise AssertionError(f"the process re-executed itself: {args[:2]}")

    socket.socketpair = _socketpair
    del socket.AF_UNIX
    sys.modules["fcntl"] = None  # `import fcntl` raises ImportError
    os.confstr = _no_confstr
    os.execve = _no_execve
