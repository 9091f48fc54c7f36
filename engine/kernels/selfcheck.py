"""The self-check at load: run each piece of a kernel table that applies against its eager reference, keep those that
pass, and say once which fell back and why.

A piece fails when it raises, when it is still running after its `timeout_s` (it then runs on in a daemon thread
whose result is ignored: a hung kernel cannot be stopped from Python), or when `error(fast, reference)` exceeds its
`tolerance` (NaN included). A failed piece is switched off for the session; the eager path serves instead. Each
checked piece gets one log line; `GpuReport.wire()` is what dg/status carries (`gpu: {checked, fellBack}`) and
`GpuReport.warning()` the one message the server shows.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.kernels.table import Piece, Target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checked:
    """One piece's check: `ok`, its wall time, its error against the reference (None: it raised or timed out) and,
    when it failed, why."""

    piece: str
    ok: bool
    seconds: float
    error: float | None
    tolerance: float
    reason: str | None = None

    def line(self) -> str:
        took = f"{self.seconds:.2f} s"
        if self.ok:
            return f"self-check {self.piece}: ok in {took} (error {self.error:.2e} <= {self.tolerance:.0e})"
        return f"self-check {self.piece}: FAILED in {took} ({self.reason}): the eager path serves instead"

    def wire(self) -> dict[str, Any]:
        return {"piece": self.piece, "ok": self.ok, "ms": round(1e3 * self.seconds, 1), "error": self.error,
                "tolerance": self.tolerance, "reason": self.reason}


@dataclass
class GpuReport:
    """Every piece checked for one loaded engine, in the order they ran."""

    device: str
    checks: list[Checked] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # pieces of the table that do not apply here (never serve)

    def passed(self, name: str) -> bool:
        return any(c.piece == name and c.ok for c in self.checks)

    def fell_back(self, name: str) -> bool:
        return any(c.piece == name and not c.ok for c in self.checks)

    def failed(self) -> list[Checked]:
        return [c for c in self.checks if not c.ok]

    def wire(self) -> dict[str, Any]:
        """dg/status's `gpu`: the pieces checked, and those that fell back with the reason."""
        return {"device": self.device, "checked": [c.piece for c in self.checks],
                "fellBack": [{"piece": c.piece, "reason": c.reason} for c in self.failed()]}

    def warning(self) -> str | None:
        """The one message for the user when a piece fell back (None when none did)."""
        bad = self.failed()
        if not bad:
            return None
        what = "; ".join(f"{c.piece} ({c.reason})" for c in bad)
        return (f"dg-lsp: {len(bad)} GPU piece(s) failed their self-check on {self.device} and are switched off, "
                f"the eager path serves instead (slower, same fills): {what}. Please run `dg-lsp doctor` and paste "
                "its report into an issue.")


def _call(piece: Piece, target: Target) -> tuple[Any, Any]:
    """(fast, reference) outputs on the piece's inputs, under inference mode (thread-local, so set here)."""
    with torch.inference_mode():
        args = piece.inputs(target)
        want = piece.reference(*args)
        got = piece.fast(*args)
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)
        return got, want


def check_piece(piece: Piece, target: Target) -> Checked:
    """Run one piece against its reference within its timeout."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["out"] = _call(piece, target)
        except BaseException as exc:  # noqa: BLE001 -- anything a kernel raises switches it off
            box["exc"] = exc

    t0 = time.perf_counter()
    thread = threading.Thread(target=work, name=f"self-check {piece.name}", daemon=True)
    thread.start()
    thread.join(piece.timeout_s)
    took = time.perf_counter() - t0
    if thread.is_alive():
        return Checked(piece.name, False, took, None, piece.tolerance, f"timed out after {piece.timeout_s:.0f} s")
    if "exc" in box:
        exc = box["exc"]
        msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        why = f"raised {type(exc).__name__}" + (f": {msg}" if msg else "")
        return Checked(piece.name, False, took, None, piece.tolerance, why)
    try:
        err = float(piece.error(*box["out"]))
    except Exception as exc:  # noqa: BLE001 -- outputs the comparison cannot read are wrong outputs
        return Checked(piece.name, False, took, None, piece.tolerance, f"unreadable output: {type(exc).__name__}")
    if not err <= piece.tolerance:  # NaN fails too
        shown = "not finite" if not math.isfinite(err) else f"{err:.2e}"
        return Checked(piece.name, False, took, err, piece.tolerance,
                       f"wrong values: error {shown} > tolerance {piece.tolerance:.0e}")
    return Checked(piece.name, True, took, err, piece.tolerance)


def run(pieces: Sequence[Piece], target: Target, report: GpuReport) -> GpuReport:
    """Check every piece that applies to `target`, in order, adding each result (and its log line) to `report`."""
    for piece in pieces:
        try:
            applies = piece.applies(target)
        except Exception:  # noqa: BLE001 -- a piece that cannot tell is not used
            applies = False
        if not applies:
            report.skipped.append(piece.name)
            continue
        checked = check_piece(piece, target)
        (log.info if checked.ok else log.warning)("%s", checked.line())
        report.checks.append(checked)
    return report
