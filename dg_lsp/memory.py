"""Giving memory back after documents close: the server runs on the system allocator and trims it once idle.

py-tree-sitter allocates every tree through Python's allocator (PyMem_Malloc). Under pymalloc, the trees of a closed
document free most of an arena, but the few Python objects that outlive it (a log record, a cached string) keep the
arena's 1 MiB from going back to the OS, so rounds of opening and closing big documents ratchet the server's memory up
(tests/reliability/memory_rounds.py; `python -m bench.reliability` reports rss_after_close_mb). With
PYTHONMALLOC=malloc the same memory sits in glibc's free lists, and one malloc_trim(0) after the closes returns it.

PYTHONMALLOC is read when the interpreter starts, so the command line re-executes itself once with it set (an
explicit PYTHONMALLOC in the environment is kept: `PYTHONMALLOC=pymalloc dg-lsp` runs without this).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Sequence

ALLOCATOR = "malloc"
TRIM_AFTER_S = 1.0  # after the last didClose, this long without another before the trim
MMAP_THRESHOLD = 128 * 1024  # glibc's default start value, kept fixed (see use_system_allocator)


def use_system_allocator(argv: Sequence[str]) -> None:
    """Re-execute `python -m dg_lsp argv` under PYTHONMALLOC=malloc, unless PYTHONMALLOC is set already or this is
    not glibc (no malloc_trim to give the memory back; no re-execution on macOS or Windows). Returns only when it
    does not re-execute."""
    if "PYTHONMALLOC" in os.environ or _trim() is None:
        return
    # A fixed mmap threshold: glibc otherwise raises it after each big free (up to 32 MB), and a closed document's
    # text and tree buffers would then stay on the heap until the trim instead of going back at once.
    env = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), **os.environ, "PYTHONMALLOC": ALLOCATOR}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "dg_lsp", *argv], env)


def release_free_memory() -> bool:
    """Return the allocator's free memory to the OS (glibc malloc_trim); False where there is none to call."""
    trim = _trim()
    return bool(trim(0)) if trim is not None else False


def glibc() -> bool:
    """This process runs on glibc (not macOS, Windows or musl, which have no malloc_trim)."""
    try:
        return sys.platform.startswith("linux") and bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError, OSError):  # no os.confstr (Windows), or a libc without the name
        return False


def _trim():
    if not glibc():
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
