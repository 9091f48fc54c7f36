"""Counting, on CPU, what engine code would ask of a GPU: host syncs and launched ops (a TorchDispatchMode).

A host sync is anything that makes the host wait for the device: reading a value (`.item()`, `bool(t)`,
`.tolist()`, `.numpy()`) or an op whose output shape depends on tensor data (`nonzero`, boolean-mask indexing,
`unique`, `bincount`, `repeat_interleave` with tensor repeats, `masked_select`). On CPU nothing waits, so these are
counted where they are called; the same code on CUDA would sync there. Used by tests/engine/test_syncs.py and
bench/step_profile.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# ops that read a device value on the host, or size their output from the data
SYNC_OPS = {
    aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default, aten.bincount.default,
    aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor, aten._unique.default, aten._unique2.default,
    aten.unique_dim.default, aten.unique_consecutive.default, aten.equal.default, aten.is_nonzero.default,
    aten.allclose.default,
}
HOST_READS = ("tolist", "numpy", "__array__")


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (indices or ()))


class OpCounter(TorchDispatchMode):
    """`syncs`: host syncs by name; `ops`: dispatched ops that would launch a kernel (views excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: Counter[str] = Counter()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS:
            self.syncs[str(func.overloadpacket.__name__)] += 1
        elif func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) and _bool_index(args):
            self.syncs[f"{func.overloadpacket.__name__} (boolean mask)"] += 1
        if not func.is_view:
            self.ops += 1
        return func(*args, **kwargs)

    @property
    def sync_count(self) -> int:
        return sum(self.syncs.values())


@contextmanager
def count_ops() -> Iterator[OpCounter]:
    """Count host syncs and ops of everything run inside, on the calling thread."""
    counter = OpCounter()
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def reader(name: str):
        def read(self, *args, **kwargs):
            counter.syncs[name] += 1
            return originals[name](self, *args, **kwargs)
        return read

    for name in HOST_READS:
        setattr(torch.Tensor, name, reader(name))
    try:
        with counter:
            yield counter
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
