"""The native CPU library (dequant.c and int8.c beside this file): compiled once per machine with the system's C
compiler into the user cache, loaded with ctypes, and called on tensors' memory. Optional: without a compiler (or with
DG_NATIVE=0) `load()` returns None, says why in `reason()`, and engine.quant.cpu_matmul keeps its torch path.

Flags: -O3 and the machine's own instruction set (-march=native; built where it runs), -ffp-contract=off (no fused
multiply-add: each value is rounded as engine.formats.gguf_quants rounds it, so the two agree bit for bit), OpenMP
where the compiler has it (rows of a tile in parallel, `threads` per call). The library's name carries a hash of the
source, the flags and the compiler's version, so an edit or a new compiler builds a new one; the build writes to a
temporary name and renames it, so concurrent first uses never load a half-written file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).parent
SOURCES = [HERE / "dequant.c", HERE / "int8.c"]  # one library; ggml_blocks.h is their shared header
HEADERS = [HERE / "ggml_blocks.h"]
# the first that compiles wins: OpenMP and the machine's instruction set, then without OpenMP, then plain -O3
FLAG_SETS = (
    ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"],
    ["-O3", "-march=native", "-ffp-contract=off"],
    ["-O3", "-ffp-contract=off"],
)
# ggml type name -> the library's type code (dequant.c's enum)
QTYPES = {"F32": 0, "F16": 1, "BF16": 2, "Q8_0": 3, "Q5_0": 4, "Q5_1": 5, "Q4_K": 6, "Q5_K": 7, "Q6_K": 8}

_lock = threading.Lock()
_state: dict[str, object] = {}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dg-lsp" / "native"


def _compiler() -> str | None:
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc)


def _version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _build(cc: str) -> tuple[Path | None, str]:
    """Compile (or find already compiled) the library: (path, "") or (None, why not)."""
    try:
        source = b"".join(p.read_bytes() for p in [*SOURCES, *HEADERS])
    except OSError as exc:  # an install that left the sources out: the torch path serves, and says why
        return None, f"the kernels' source is missing ({exc})"
    errors = []
    version = _version(cc)
    for flags in FLAG_SETS:
        tag = hashlib.sha256(source + " ".join(flags).encode() + version.encode()).hexdigest()[:16]
        out = cache_dir() / f"dequant-{tag}.so"
        if out.is_file():
            return out, ""
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        cmd = [cc, *flags, "-shared", "-fPIC", "-o", tmp, *map(str, SOURCES), "-lm"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            done, errors = None, [*errors, f"{' '.join(flags)}: {exc}"]
        if done is not None and done.returncode == 0:
            os.replace(tmp, out)
            return out, ""
        if done is not None:
            errors.append(f"{' '.join(flags)}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
        Path(tmp).unlink(missing_ok=True)
    return None, "the C compiler failed: " + "; ".join(errors)


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    lib.dg_dequant_rows.argtypes = [i32, ptr, i64, i64, i64, ptr, i64, i32]
    lib.dg_dequant_rows.restype = i32
    lib.dg_dequant_gather.argtypes = [i32, ptr, i64, ptr, i64, i64, ptr, i64]
    lib.dg_dequant_gather.restype = i32
    lib.dg_qmatmul.argtypes = [i32, ptr, i64, i64, i64, ptr, i64, i64, ptr, i64, i32]
    lib.dg_qmatmul.restype = i32
    lib.dg_qmatmul_int8.argtypes = [i32, ptr, i64, i64, i64, ptr, i64, i64, ptr, i64, i32]
    lib.dg_qmatmul_int8.restype = i32
    lib.dg_int8_available.argtypes = []
    lib.dg_int8_available.restype = i32
    lib.dg_native_openmp.argtypes = []
    lib.dg_native_openmp.restype = i32
    return lib


def load() -> ctypes.CDLL | None:
    """The library, built on first call (None where it cannot be: `reason()` says why)."""
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        lib, why = None, ""
        if os.environ.get("DG_NATIVE", "1") == "0":
            why = "DG_NATIVE=0"
        elif (cc := _compiler()) is None:
            why = f"no C compiler ({os.environ.get('CC') or 'cc'}) on PATH"
        else:
            path, why = _build(cc)
            if path is not None:
                try:
                    lib = _bind(ctypes.CDLL(str(path)))
                except OSError as exc:
                    lib, why = None, f"{path}: {exc}"
        _state["lib"], _state["why"] = lib, why
        return lib


def reason() -> str:
    """Why the library is not in use ("" when it is, or before the first `load()`)."""
    return str(_state.get("why", ""))


def reset() -> None:
    """Forget the loaded library (tests: load again under another environment)."""
    with _lock:
        _state.clear()


def status() -> dict[str, object]:
    """What `dg-lsp --check` shows on a CPU: whether the library is in use (else why not), with OpenMP, with the
    8-bit products (AVX2)."""
    lib = load()
    if lib is None:
        return {"native": False, "why": reason()}
    return {"native": True, "openmp": bool(lib.dg_native_openmp()), "int8_products": bool(lib.dg_int8_available()),
            "activations": os.environ.get("DG_CPU_ACTIVATIONS", "int8")}
