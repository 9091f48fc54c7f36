"""A latency hint for the server's two threads: a short scheduler slice, where Linux takes one (EEVDF, 6.12+).

Both threads sleep most of the time and must run at once when woken: the loop when a keystroke or an engine result
comes, the engine thread when a job comes. On a busy machine the kernel lets the task on the CPU finish its slice
first (`sched_base_slice_ns`; more in practice with a few CPU-bound processes per core), and that wait
lands on the keystroke. A thread that asks for a shorter slice (`sched_attr.sched_runtime` with SCHED_OTHER, no
privilege needed) may preempt it on wake-up; its share of the CPU does not change, only how it is cut. Best effort:
on other systems, older kernels (which ignore the field) or any refusal, nothing happens.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import sys
import threading

log = logging.getLogger(__name__)

SLICE_S = 0.0003  # the kernel clamps to [0.1 ms, 100 ms]
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}  # syscall numbers (glibc has no wrapper before 2.41)


class _SchedAttr(ctypes.Structure):
    """struct sched_attr, SCHED_ATTR_SIZE_VER0 (48 bytes)."""

    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64)]


def short_slice(slice_s: float = SLICE_S) -> bool:
    """Ask for a `slice_s` scheduler slice for the calling thread (SCHED_OTHER, its nice value kept). True when the
    kernel took the request."""
    number = _SCHED_SETATTR.get(platform.machine())
    if not sys.platform.startswith("linux") or number is None:
        return False
    try:
        tid = threading.get_native_id()
        if os.sched_getscheduler(tid) != os.SCHED_OTHER:  # the user chose a policy (chrt): keep it
            return False
        libc = ctypes.CDLL(None, use_errno=True)
        nice = os.getpriority(os.PRIO_PROCESS, tid)  # a thread's nice value: PRIO_PROCESS with its tid on Linux
        attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=0, sched_nice=nice,
                          sched_runtime=int(slice_s * 1e9))
        if libc.syscall(number, tid, ctypes.byref(attr), 0) != 0:
            log.info("scheduler slice not set: errno %d", ctypes.get_errno())
            return False
    except (OSError, AttributeError) as e:
        log.info("scheduler slice not set: %s", e)
        return False
    return True
