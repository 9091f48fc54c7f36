"""`dg-lsp doctor`: the report a user runs and pastes into an issue: versions, the device and its free memory, the
model's plan (weights format, bytes, KV per token, whether it fits), every GPU self-check with its time and result,
one timed fill (encode ms, ms per step, tokens/s) and the weight-streaming floor of this device for these weights
(bandwidth from a measured copy). Plain text, or one JSON object with --json. Exit 0 when the model loaded and
filled, 1 otherwise (the report still says as much as it could find out).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import subprocess
import sys
import time
from typing import Any

import torch

SAMPLE_PREFIX, SAMPLE_SUFFIX = "def add(a, b):\n    return ", "\n"
COPY_BYTES = {"cuda": 256 << 20, "cpu": 64 << 20}  # the bandwidth probe's buffer


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    """The NVIDIA driver's version from nvidia-smi (None without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None


def versions() -> dict[str, str | None]:
    return {"dg-lsp": _version("dg-lsp") or "checkout", "python": sys.version.split()[0], "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda, "driver": _driver(), "triton": _version("triton"),
            "transformers": _version("transformers")}


def device_info(device: torch.device) -> dict[str, Any]:
    from engine.quant.memory import free_bytes

    out: dict[str, Any] = {"device": str(device), "free_bytes": free_bytes(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(name=props.name, capability=f"{props.major}.{props.minor}", total_bytes=props.total_memory)
    else:
        out.update(name="cpu", threads=torch.get_num_threads())
    return out


def bandwidth(device: torch.device, nbytes: int | None = None, reps: int = 5) -> float:
    """Bytes per second of a device-to-device copy (each byte read once and written once), best of `reps`."""
    n = nbytes or COPY_BYTES.get(device.type, COPY_BYTES["cpu"])
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n / best


def timed_fill(eng: Any) -> dict[str, Any]:
    """One sample fill after a warm-up fill (which pays first-use costs: a graph capture, allocations)."""
    fmt = eng.prompt_format
    ids = fmt.context(eng.encode(SAMPLE_PREFIX), eng.encode(SAMPLE_SUFFIX))
    canvas = min(fmt.canvas_lengths)
    cold = eng.infill(ids, canvas_length=canvas)
    eng.clear_prefix_cache()  # the timed fill encodes its whole context
    res = eng.infill(ids, canvas_length=canvas, seed=1)
    if res.error is not None:
        raise RuntimeError(res.error)
    t = res.timings
    return {"canvas": canvas, "context_tokens": len(ids), "steps": res.steps, "tokens": len(res.ids),
            "encode_ms": round(t["encode_ms"], 2), "ms_per_step": round(t["decode_ms"] / max(res.steps, 1), 2),
            "tokens_per_s": round(len(res.ids) / max(t["total_ms"] / 1e3, 1e-9), 1),
            "cold_total_ms": round(cold.timings["total_ms"], 1), "text": eng.decode(res.ids)}


def run(model: str | None = None, device: str = "auto", weights: str = "auto", table: Any = None) -> dict[str, Any]:
    """The report as a dict (keys: ok, versions, device, plan, self_checks, fill, floor, seconds, and error when
    something failed). `table`: the kernel table to check the engine with (tests give doubles)."""
    from engine.engine import Engine, resolve_device
    from engine.quant.modules import weight_bytes

    t0, threads = time.perf_counter(), torch.get_num_threads()
    out: dict[str, Any] = {"ok": False, "versions": versions(), "model": model or "default"}
    try:
        dev = resolve_device(device)
        if dev.type == "cpu":  # as the server runs the engine there (dg_lsp.backends.loading.load_engine)
            torch.set_num_threads(1)
        out["device"] = device_info(dev)
        eng = Engine.from_pretrained(model, device=dev, weights=weights)  # the fit check raises before loading
        if table is not None:
            eng.self_check(table)
        nbytes = weight_bytes(eng.model)
        out["plan"] = {"weights": eng.weights, "dtype": str(eng.dtype).removeprefix("torch."), "weight_bytes": nbytes,
                       "kv_bytes_per_token": eng.kv_bytes_per_token(), "kv_bytes_4k_context": eng.kv_bytes(4096),
                       "free_bytes_after_load": out["device"]["free_bytes"] if dev.type != "cuda"
                       else int(torch.cuda.mem_get_info(dev)[0])}
        out["self_checks"] = {**eng.gpu.wire(), "pieces": [c.wire() for c in eng.gpu.checks],
                              "not_applicable": list(eng.gpu.skipped), "cuda_graphs": eng.cuda_graphs,
                              "compile": eng.compile}
        out["fill"] = timed_fill(eng)
        bw = bandwidth(dev)
        floor = 1e3 * nbytes / bw  # every step streams the weights once
        out["floor"] = {"bandwidth_gb_s": round(bw / 1e9, 1), "floor_ms_per_step": round(floor, 3),
                        "floor_over_measured": round(floor / max(out["fill"]["ms_per_step"], 1e-9), 3)}
        out["ok"] = not eng.gpu.failed()
    except Exception as exc:  # noqa: BLE001 -- a diagnostic: say what failed, keep what was found
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        torch.set_num_threads(threads)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _gb(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def text(r: dict[str, Any]) -> str:
    """The report as lines to paste."""
    v = r["versions"]
    lines = ["dg-lsp doctor", "versions: " + ", ".join(f"{k} {v[k] or '(none)'}" for k in v)]
    if d := r.get("device"):
        extra = f", compute capability {d['capability']}, {_gb(d['total_bytes'])} total" if "capability" in d else ""
        lines.append(f"device: {d['device']} ({d['name']}{extra}): {_gb(d['free_bytes'])} free")
    if p := r.get("plan"):
        stored = "unquantized" if p["weights"] == "bf16" else p["weights"]  # engine.quant: "bf16" = the compute dtype
        lines.append(f"plan: {r['model']}: weights {stored} ({p['dtype']} compute), {_gb(p['weight_bytes'])}; "
                     f"KV {p['kv_bytes_per_token']} bytes per context token ({_gb(p['kv_bytes_4k_context'])} for 4k)")
    if s := r.get("self_checks"):
        lines.append(f"self-checks on {s['device']}: {len(s['pieces'])} checked, {len(s['fellBack'])} fell back; "
                     f"CUDA graphs {'on' if s['cuda_graphs'] else 'off'}, compile {'on' if s['compile'] else 'off'}")
        for c in s["pieces"]:
            res = f"ok (error {c['error']:.2e} <= {c['tolerance']:.0e})" if c["ok"] else f"FELL BACK: {c['reason']}"
            lines.append(f"  {c['piece']}: {res}, {c['ms']:.0f} ms")
        if s["not_applicable"]:
            lines.append(f"  not applicable here: {', '.join(s['not_applicable'])}")
    if f := r.get("fill"):
        lines.append(f"fill: canvas {f['canvas']}, {f['context_tokens']} context tokens, {f['steps']} steps, "
                     f"{f['tokens']} tokens: encode {f['encode_ms']} ms, {f['ms_per_step']} ms/step, "
                     f"{f['tokens_per_s']} tokens/s (first fill {f['cold_total_ms']} ms)")
    if fl := r.get("floor"):
        lines.append(f"streaming floor: copy bandwidth {fl['bandwidth_gb_s']} GB/s -> {fl['floor_ms_per_step']} ms "
                     f"per step for these weights ({fl['floor_over_measured']:.1%} of the measured step)")
    if "error" in r:
        lines.append(f"error: {r['error']}")
    lines.append(f"{'ok' if r['ok'] else 'NOT OK'} in {r['seconds']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dg-lsp doctor", description="Check this machine and model; paste the report "
                                 "into an issue.")
    ap.add_argument("--model", metavar="DIR", default=None, help="checkpoint (default: the shipped model)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when torch sees one), cuda, cuda:N or cpu")
    ap.add_argument("--weights", default="auto", choices=["auto", "bf16", "int8", "int4", "fp8"])
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args(argv)
    report = run(args.model, args.device, args.weights)
    print(json.dumps(report) if args.json else text(report))
    return 0 if report["ok"] else 1
