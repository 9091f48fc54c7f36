"""Read a checkpoint's tensors one at a time, lazily: plain safetensors shards, or a compressed-tensors FP8 checkpoint
(e4m3 weights with `weight_scale` companions) presented in the plain layout's names.

Each tensor comes as (name, shape, read): `read()` returns a float tensor, or QuantParts for an FP8 weight, so a
caller holds at most one tensor's worth of source data at a time. In a compressed-tensors checkpoint the MoE experts
are per-expert linears (`...experts.{e}.{gate,up,down}_proj.weight`, what the library writes for nn.Linear
modules); they are fused here into the plain layout's `experts.gate_up_proj` (E, 2I, H) and `experts.down_proj`
(E, H, I), filled expert by expert into a buffer of the stored format.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from engine.quant.formats import QuantParts

Read = Callable[[], "torch.Tensor | QuantParts"]
_EXPERT = re.compile(r"^(?P<prefix>.*\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")
_COMPANIONS = (".weight_scale", ".weight_zero_point", ".input_scale", ".input_zero_point", ".weight_global_scale")


class QuantConfigError(ValueError):
    """A checkpoint's quantization_config names a scheme this engine cannot serve; the message says which."""


def quantization_config(path: Path) -> dict | None:
    """The raw `quantization_config` of a checkpoint's config.json, or None for an unquantized checkpoint."""
    cfg = path / "config.json"
    raw = json.loads(cfg.read_text()) if cfg.is_file() else {}
    return raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")


def fp8_dynamic_scheme(raw: dict) -> bool:
    """Check a compressed-tensors quantization_config (parsed by the compressed-tensors library) is FP8 weights
    with per-channel (or per-tensor) static scales; returns whether activations are dynamic per-token FP8."""
    if raw.get("quant_method") != "compressed-tensors":
        raise QuantConfigError(f"quant_method {raw.get('quant_method')!r} is not supported (compressed-tensors FP8 "
                               "is; int4/int8 are made on load from a bf16 checkpoint with weights=int4|int8)")
    from compressed_tensors.quantization import QuantizationConfig

    qc = QuantizationConfig.model_validate(raw)
    if qc.format not in ("float-quantized", None):
        raise QuantConfigError(f"compressed-tensors format {qc.format!r} is not supported (float-quantized is)")
    act = set()
    for name, group in qc.config_groups.items():
        w = group.weights
        if w is None or w.num_bits != 8 or w.type != "float" or str(w.strategy) not in ("channel", "tensor") \
                or not w.symmetric or w.dynamic:
            raise QuantConfigError(f"config group {name}: weights {w} are not FP8 e4m3 with static per-channel "
                                   "scales")
        a = group.input_activations
        if a is not None and not (a.dynamic and str(a.strategy) == "token" and a.num_bits == 8 and a.type == "float"):
            raise QuantConfigError(f"config group {name}: input activations {a} are not dynamic per-token FP8")
        if group.output_activations is not None:
            raise QuantConfigError(f"config group {name}: output activation quantization is not supported")
        act.add(a is not None)
    if len(act) > 1:
        raise QuantConfigError("config groups disagree on activation quantization")
    return act == {True}


def _shape(f, name: str) -> tuple[int, ...]:
    return tuple(f.get_slice(name).get_shape())


def plain_tensors(files: list[Path]) -> Iterator[tuple[str, tuple[int, ...], Read]]:
    """Every tensor of plain safetensors shards, in file order; `read` is valid until the next item."""
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, _shape(f, name), (lambda f=f, name=name: f.get_tensor(name))


def fp8_tensors(files: list[Path], act_dynamic: bool) -> Iterator[tuple[str, tuple[int, ...], Read]]:
    """Tensors of a compressed-tensors FP8 checkpoint in the plain layout: a quantized weight reads as QuantParts
    (scale fp32 (..., N, 1)); per-expert linears are fused (see the module docstring)."""
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(safe_open(str(f), framework="pt", device="cpu")) for f in files]
        where = {name: h for h in handles for name in h.keys()}

        def read_one(name: str) -> torch.Tensor | QuantParts:
            h = where[name]
            t = h.get_tensor(name)
            scale_name = name[: -len(".weight")] + ".weight_scale" if name.endswith(".weight") else None
            if t.dtype != torch.float8_e4m3fn:
                return t
            if scale_name not in where:
                raise QuantConfigError(f"{name} is float8 but has no {scale_name}")
            s = where[scale_name].get_tensor(scale_name).float()
            s = s.reshape(-1, 1).expand(t.shape[0], 1).contiguous() if s.numel() in (1, t.shape[0]) else None
            if s is None:
                raise QuantConfigError(f"{scale_name}: expected one scale per output channel or per tensor")
            return QuantParts("fp8", tuple(t.shape), t, s, act_dynamic=act_dynamic)

        experts: dict[str, dict[tuple[str, int], str]] = {}
        for name in where:
            m = _EXPERT.match(name)
            if m:
                experts.setdefault(m["prefix"], {})[(m["proj"], int(m["e"]))] = name
        done: set[str] = set()
        for name in where:
            if name.endswith(_COMPANIONS):
                if name.endswith((".input_scale", ".input_zero_point")):
                    raise QuantConfigError(f"{name}: static activation scales are not supported (FP8-dynamic is)")
                continue
            m = _EXPERT.match(name)
            if m is None:
                yield name, _shape(where[name], name), (lambda name=name: read_one(name))
                continue
            if m["prefix"] in done:
                continue
            done.add(m["prefix"])
            pieces = experts[m["prefix"]]
            n_exp = 1 + max(e for _, e in pieces)
            missing = [(p, e) for p in ("gate_proj", "up_proj", "down_proj") for e in range(n_exp)
                       if (p, e) not in pieces]
            if missing:
                raise QuantConfigError(f"{m['prefix']}: expert linears missing: {missing[:6]}")
            inter, hidden = _shape(where[pieces[("gate_proj", 0)]], pieces[("gate_proj", 0)])
            fused = {"gate_up_proj": (n_exp, 2 * inter, hidden), "down_proj": (n_exp, hidden, inter)}
            for proj, shape in fused.items():
                yield (f"{m['prefix']}.{proj}", shape,
                       lambda proj=proj, shape=shape, pieces=pieces: _fuse(proj, shape, pieces, read_one))


def _fuse(proj: str, shape: tuple[int, ...], pieces: dict, read_one) -> torch.Tensor | QuantParts:
    """Per-expert linears -> one (E, N, K) tensor (or fp8 QuantParts), gate rows before up rows per expert."""
    order = [("gate_proj", "up_proj")] if proj == "gate_up_proj" else [("down_proj",)]
    q = scale = None
    parts = None
    for e in range(shape[0]):
        row = 0
        for p in order[0]:
            got = read_one(pieces[(p, e)])
            if q is None:  # the first piece decides the buffer's format
                parts = got if isinstance(got, QuantParts) else None
                q = torch.empty(shape, dtype=(got.qweight if parts else got).dtype)
                scale = torch.empty(*shape[:-1], 1, dtype=torch.float32) if parts else None
            if isinstance(got, QuantParts) != (parts is not None):
                raise QuantConfigError(f"expert {e} {p}: quantized and unquantized expert linears are mixed")
            n = got.shape[0]
            if isinstance(got, QuantParts):
                q[e, row:row + n], scale[e, row:row + n] = got.qweight, got.scale
            else:
                q[e, row:row + n] = got
            row += n
    if parts is None:
        return q
    return QuantParts("fp8", shape, q, scale, act_dynamic=parts.act_dynamic)


def tensors(path: Path, files: list[Path]) -> Iterator[tuple[str, tuple[int, ...], Read]]:
    """The checkpoint's tensors in the plain layout, whatever its storage (plain or compressed-tensors FP8)."""
    raw = quantization_config(path)
    if raw is None:
        yield from plain_tensors(files)
    else:
        yield from fp8_tensors(files, fp8_dynamic_scheme(raw))
