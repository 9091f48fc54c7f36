"""`dg-lsp --check`: load a checkpoint, show the prompt it gets for a sample hole, fill it once; one JSON dict."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from engine.seam import HoleInfo

SAMPLE_PREFIX = "def add(a, b):\n    return "
SAMPLE_SUFFIX = "\n"
SAMPLE_HOLE = HoleInfo(kind="rest_of_line", language="python", filename="example.py", lines=1)


def weights_bytes(module: Any) -> int:
    """Bytes of the model's parameters and buffers, each storage counted once (shared encoder tensors)."""
    seen: dict[int, int] = {}
    for t in [*module.parameters(), *module.buffers()]:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _tokenizer_source(eng: Any) -> str:
    if eng.tokenizer is not None:
        return eng.tokenizer_source
    return (f"{eng.tokenizer_source}; put the model's HF tokenizer.json (and tokenizer_config.json, "
            "chat_template.jinja) beside the checkpoint; without a tokenizer only the id-based API works")


def _template_source(fmt: Any) -> str:
    template = getattr(fmt, "template", None)
    return template.source if template is not None else f"not used ({fmt.name} prompt format)"


def run_check(model: str | None = None, *, device: str = "auto", dtype: str = "auto", prompt_format: str = "auto",
              sampler: Mapping[str, Any] | None = None, fill: bool = True, weights: str = "auto") -> dict[str, Any]:
    """Keys: ok, model, checkpoint (format; for a GGUF its files, per-type tensor counts and bytes, the optional
    metadata keys defaulted; the tokenizer's source; the chat template's source or why none is used), device, dtype,
    load_ms, prompt_format, prompt_preview (the sample hole's prompt decoded with its special tokens),
    prompt_tokens, canvas_lengths, eos_ids, sampler ({name: {value, source}}), weights (the format in force),
    weights_bytes, memory (weight bytes per format for this shape, the device's free memory, which formats fit, what
    weights=auto picks, as lines to read), on a CPU cpu_kernels (whether the native kernels for quantized files are
    in use or why not, with OpenMP, with the 8-bit products, DG_CPU_ACTIVATIONS), kv_bytes_per_token and
    kv_bytes_4k_context, and with `fill` the answer (fill, raw canvas text, steps, fill_ms) and `seeded`: the same
    hole filled again from a canvas seeded with that answer at start_noise 0 (how many of its tokens the model keeps:
    a checkpoint confident in its own answer keeps them all, which a seeded rewrite relies on). On failure ok is False
    and `error` says what went wrong (a checkpoint too big for the device names the format that would fit)."""
    out: dict[str, Any] = {"ok": False, "model": model or "default"}
    try:
        from engine.engine import Engine

        t0 = time.perf_counter()
        from engine.formats import gguf
        from engine.quant.plan import gguf_weight_bytes

        if model is not None and gguf.is_gguf(model):  # the file's mix before loading: a refusal still names it
            from engine.families.gguf import summary

            out["checkpoint"] = summary(model)  # DiffusionGemma's, or a dream / llada file's
        eng = Engine.from_pretrained(model, device=device, dtype=dtype, prompt_format=prompt_format, sampler=sampler,
                                     weights=weights)
        out.setdefault("checkpoint", {"format": "safetensors"})
        out["checkpoint"]["tokenizer"] = _tokenizer_source(eng)
        memory = eng.memory_report()
        if out["checkpoint"]["format"] == "gguf" and "architecture" not in out["checkpoint"]:
            packed = gguf_weight_bytes(model, eng.dtype.itemsize, eng.device)
            memory["bytes"]["gguf"] = packed
            memory["lines"].insert(0, f"weights gguf (blocks kept packed, weights=auto): {packed / 1e9:.2f} GB")
        out.update(model=str(eng.path), device=str(eng.device), dtype=str(eng.dtype).removeprefix("torch."),
                   load_ms=round((time.perf_counter() - t0) * 1e3, 1), weights=eng.weights,
                   weights_bytes=weights_bytes(eng.model), memory=memory,
                   kv_bytes_per_token=eng.kv_bytes_per_token(), kv_bytes_4k_context=eng.kv_bytes(4096),
                   eos_ids=list(eng.config.eos_token_ids), sampler=eng.settings_in_force())
        if eng.device.type == "cpu":
            from engine.quant.native import build

            out["cpu_kernels"] = build.status()
        fmt = eng.prompt_format
        ids = fmt.context(eng.encode(SAMPLE_PREFIX), eng.encode(SAMPLE_SUFFIX), SAMPLE_HOLE)
        out["checkpoint"]["chat_template"] = _template_source(fmt)
        out.update(prompt_format=fmt.name, prompt_preview=eng.decode(ids), prompt_tokens=len(ids),
                   canvas_lengths=list(fmt.canvas_lengths))
        if fill:
            res = eng.infill(ids, canvas_length=min(fmt.canvas_lengths))
            out.update(fill=fmt.answer(res.text, SAMPLE_PREFIX, SAMPLE_SUFFIX), raw=res.text, steps=res.steps,
                       fill_ms=round(res.timings.get("total_ms", 0.0), 1))
            again = eng.infill(ids, canvas_length=min(fmt.canvas_lengths), seed=1, init_ids=res.ids, start_noise=0.0)
            kept = sum(a == b for a, b in zip(again.ids, res.ids, strict=False))
            out["seeded"] = {"start_noise": 0.0, "raw": again.text, "kept": f"{kept}/{len(res.ids)}",
                             "identical": again.ids == res.ids}
        out["ok"] = True
    except Exception as exc:  # report any failure as JSON: this is a diagnostic command
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out
