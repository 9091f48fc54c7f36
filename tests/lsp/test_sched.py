"""dg_lsp.sched: the short scheduler slice is set on the calling thread where the kernel takes it, and nothing else
changes (policy, nice value)."""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

import pytest

from dg_lsp import sched


def slice_of(tid: int) -> int:
    """sched_getattr's sched_runtime (ns) for thread `tid`."""
    attr = sched._SchedAttr()  # noqa: SLF001
    number = {"x86_64": 315, "aarch64": 275}[platform.machine()]
    assert ctypes.CDLL(None, use_errno=True).syscall(number, tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) == 0
    return attr.sched_runtime


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"),
                    reason="sched_setattr is Linux's")
def test_a_thread_gets_the_slice_it_asks_for_and_keeps_its_policy_and_nice_value():
    out = {}
    main_slice = slice_of(threading.get_native_id())

    def run() -> None:
        tid = threading.get_native_id()
        before = (os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid), slice_of(tid))
        took = sched.short_slice(0.0005)
        out.update(tid=tid, before=before, took=took, after=(os.sched_getscheduler(tid),
                                                             os.getpriority(os.PRIO_PROCESS, tid), slice_of(tid)))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if not out["took"]:
        pytest.skip("this kernel refused a custom slice")
    assert out["after"][:2] == out["before"][:2]
    # kernels before 6.12 accept the call and ignore the field; from 6.12 on it is the thread's slice
    assert out["after"][2] in (500_000, out["before"][2])
    assert slice_of(threading.get_native_id()) == main_slice  # only that thread
