"""The byte layout of one GGUF file checked before any reader maps it: the header read within the file's bounds, and
every tensor's dimensions, type and extent. A broken file is refused with one line naming the tensor or header field
at fault, never with the gguf package's reshape or index errors (which name neither).

GGUF v2/v3 (ggml `docs/gguf.md`): magic `GGUF`, u32 version, u64 tensor count, u64 key count; each key a
u64-length string, a u32 value type and the value (arrays: u32 element type, u64 count, elements); each tensor a
name, u32 n_dims, u64 dims (innermost first), u32 ggml type, u64 offset into the data section, which starts at the
next multiple of `general.alignment` (32 by default) after the tensor infos. Little-endian only (what llama.cpp
writes and this engine reads).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 48  # far beyond any model tensor; a larger count is a corrupt dimension
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class LayoutError(ValueError):
    """The file's bytes do not hold what its header says; the message names the field or tensor (no file name)."""


@dataclass(frozen=True)
class TensorExtent:
    name: str
    qtype: str
    dims: tuple[int, ...]  # ggml order (innermost first)
    start: int  # absolute byte offset in the file
    nbytes: int


def _n(x: int) -> str:
    return f"{x:,}"


class _Cursor:
    def __init__(self, buf, size: int) -> None:
        self.buf, self.size, self.at = buf, size, 0

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.at + n > self.size:
            raise LayoutError(f"truncated header: {what} needs bytes {_n(self.at)}..{_n(self.at + n)}, the file has "
                              f"{_n(self.size)}")
        at = self.at
        self.at += n
        return at

    def scalar(self, fmt: str, what: str):
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.scalar("<Q", f"the length of {what}")
        at = self.take(n, f"{what} ({_n(n)} bytes)")
        return bytes(self.buf[at:at + n]).decode("utf-8", errors="replace")

    def value(self, vtype: int, what: str):
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype != _ARRAY:
            raise LayoutError(f"{what} has unknown value type {vtype}")
        etype, count = self.scalar("<I", f"the element type of {what}"), self.scalar("<Q", f"the length of {what}")
        if etype in _SCALARS:  # skipped whole: only general.alignment's value is needed from the keys
            self.take(count * struct.calcsize(_SCALARS[etype]), f"{what} ({_n(count)} values)")
            return None
        if etype == _ARRAY:
            raise LayoutError(f"{what} is an array of arrays")
        if count > self.size - self.at:  # each element takes at least one byte
            raise LayoutError(f"{what} claims {_n(count)} elements, more than the file's {_n(self.size)} bytes hold")
        for i in range(count):
            self.value(etype, f"{what}[{i}]")
        return None


def check_layout(path: str | Path) -> list[TensorExtent]:
    """Check the header and every tensor's extent of the GGUF at `path`; returns the extents. Raises LayoutError."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    size = path.stat().st_size
    if size < 24:
        raise LayoutError(f"truncated header: {_n(size)} bytes, a GGUF header takes at least 24")
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, size)
        if bytes(buf[:4]) != MAGIC:
            raise LayoutError(f"not a GGUF file (magic {bytes(buf[:4])!r}, expected {MAGIC!r})")
        cur.at = 4
        version = cur.scalar("<I", "the version")
        if version not in VERSIONS:
            raise LayoutError(f"GGUF version {version} is not supported (2 and 3 are; a big-endian file reads as a "
                              "huge version)")
        n_tensors, n_kv = cur.scalar("<Q", "the tensor count"), cur.scalar("<Q", "the key count")
        if n_kv > size // 13:  # a key takes at least 8 (length) + 1 + 4 (type) bytes
            raise LayoutError(f"the header claims {_n(n_kv)} metadata keys, more than {_n(size)} bytes can hold")
        if n_tensors > size // 24:  # a tensor info takes at least 8 + 1 + 4 + 8 + 4 + 8 bytes (one dim)
            raise LayoutError(f"the header claims {_n(n_tensors)} tensors, more than {_n(size)} bytes can hold")
        alignment = 32
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            vtype = cur.scalar("<I", f"the type of metadata key {key!r}")
            value = cur.value(vtype, f"metadata key {key!r}")
            if key == "general.alignment":
                if vtype != 4 or not value or value & (value - 1):
                    raise LayoutError(f"general.alignment must be a u32 power of two, got {value!r}")
                alignment = value
        infos = []
        for i in range(n_tensors):
            name = cur.string(f"the name of tensor #{i}")
            n_dims = cur.scalar("<I", f"the dimension count of tensor {name}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise LayoutError(f"tensor {name} has {n_dims} dimensions (ggml allows 1..{MAX_DIMS})")
            dims = tuple(cur.scalar("<Q", f"dimension {d} of tensor {name}") for d in range(n_dims))
            qtype = cur.scalar("<I", f"the type of tensor {name}")
            offset = cur.scalar("<Q", f"the data offset of tensor {name}")
            infos.append((name, dims, qtype, offset))
        data_start = -(-cur.at // alignment) * alignment
    out = []
    for name, dims, qtype, offset in infos:
        shape = tuple(reversed(dims))  # torch order, as the messages show shapes
        if 0 in dims:
            raise LayoutError(f"tensor {name} has a zero dimension: shape {shape}")
        elements = 1
        for d in dims:
            elements *= d
        if elements > MAX_ELEMENTS:
            raise LayoutError(f"tensor {name} has absurd dimensions: shape {shape} holds {_n(elements)} values")
        try:
            kind = GGMLQuantizationType(qtype)
        except ValueError:
            raise LayoutError(f"tensor {name} has unknown ggml type {qtype}") from None
        block, block_bytes = GGML_QUANT_SIZES[kind]
        if dims[0] % block:
            raise LayoutError(f"tensor {name}: rows of {_n(dims[0])} values are not whole {kind.name} blocks of "
                              f"{block}")
        nbytes = elements // block * block_bytes
        start = data_start + offset
        if offset % alignment:
            raise LayoutError(f"tensor {name}: data offset {_n(offset)} is not a multiple of the alignment "
                              f"{alignment}")
        if nbytes > size:
            raise LayoutError(f"tensor {name} has absurd dimensions: shape {shape} of {kind.name} needs "
                              f"{_n(nbytes)} bytes, more than the whole file ({_n(size)})")
        if start >= size:
            raise LayoutError(f"tensor {name}: its data offset points past the end of the file (byte "
                              f"{_n(start)}, the file has {_n(size)})")
        if start + nbytes > size:
            raise LayoutError(f"truncated: tensor {name} needs bytes {_n(start)}..{_n(start + nbytes)}, the file has "
                              f"{_n(size)}")
        out.append(TensorExtent(name, kind.name, dims, start, nbytes))
    return out
