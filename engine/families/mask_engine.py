"""The embedded engine for mask-diffusion families (Dream, Open-dCoder, LLaDA), behind the same seam as
DiffusionGemma's: an `engine.base.BaseEngine` (as `engine.engine.Engine` is) whose fills run the one masked
denoising loop (engine.denoising.masked) with the family's sampler over the whole window (prefix, canvas, suffix)
every step.

There is no causal encoder, so nothing is cached across fills or steps (the exact path: every step recomputes the
window; `sampler={"dual_cache": N}` opts into Fast-dLLM's approximate dual cache, engine.families.dual_cache). What
the family cannot do is refused by name: an entropy bound, one-per-step acceptance, weight formats
other than the checkpoint's own, prompt formats other than mask infill. A fill of several canvases is one canvas of
their total length (the window attends over all of it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from engine.base import BaseEngine, Draft, InfillResult, resolve_device, resolve_dtype
from engine.config import ConfigError
from engine.denoising.masked import denoise_masked
from engine.denoising.sampler import cut_at_eos
from engine.families.checkpoint import FamilyCheckpoint, eos_ids, mask_token_id, read_json, resolve_settings
from engine.families.contract import MaskFamily, MaskModel
from engine.families.dense import DenseLM
from engine.families.dual_cache import DualCache
from engine.loader import checkpoint_files, load_tokenizer
from engine.model.prefix_cache import PrefixCache
from engine.prompts.mask import MaskInfillFormat
from engine.quant.checkpoint import tensors
from engine.seam import CancelFlag, fill_confidence, seed_canvases


class MaskEngine(BaseEngine):
    """A loaded mask-diffusion checkpoint (see the module docstring). `family` is its registry entry."""

    def __init__(self, family: MaskFamily, model: MaskModel, config: FamilyCheckpoint, tokenizer: Any,
                 fmt: MaskInfillFormat | None, device: torch.device, dtype: torch.dtype, path: Path) -> None:
        # Not Engine.__init__: no encoder, no step runner, no CUDA graphs; the same seam members and text helpers.
        self.family, self.model, self.config, self.tokenizer = family, model, config, tokenizer
        self.infill_format, self.device, self.dtype, self.path = fmt, device, dtype, path
        self.vocab_size = config.text.vocab_size
        self._lock = threading.RLock()
        self.prefix_cache = PrefixCache(0, 1)  # nothing to reuse: no causal context encoder
        self.weights, self.tokenizer_source, self.sampler_backend = "bf16", "none", "torch"
        self.cuda_graphs = self.compile = False
        # Fast-dLLM's dual cache (engine.families.dual_cache): a full pass every this many steps; None: exact
        self.dual_cache: int | None = None

    @classmethod
    def load(cls, family: MaskFamily, path: Path, *, device: str | torch.device = "auto",
             dtype: str | torch.dtype = "auto", prompt_format: str = "auto",
             sampler: Mapping[str, Any] | None = None, weights: str = "auto") -> MaskEngine:
        if path.suffix == ".gguf" or not (path / "config.json").is_file():  # llama.cpp's dream / llada GGUF
            from engine.families.gguf import load_gguf

            return load_gguf(cls, family, path, device=device, dtype=dtype, prompt_format=prompt_format,
                             sampler=sampler, weights=weights)
        family.traits.refuse(family.name, "weights", weights, ("auto", *family.traits.weight_formats))
        family.traits.refuse(family.name, "prompt format", prompt_format, ("auto", *family.traits.prompt_formats))
        text = family.read_config(path)
        gen = read_json(path / "generation_config.json")
        sampler = dict(sampler or {})
        dual = sampler.pop("dual_cache", None)  # the engine's own setting, not an upstream sampler's
        if dual is not None and (isinstance(dual, bool) or not isinstance(dual, int) or dual < 1):
            raise ConfigError(f"dual_cache must be a refresh interval in steps (an int >= 1), got {dual!r}")
        settings, sources = resolve_settings(family.settings, gen, sampler, family.name)
        raw = read_json(path / "config.json")
        eos, sources["eos_token_ids"] = eos_ids(raw, gen)
        sources["mask_token_id"] = mask_token_id(path, raw.get("mask_token_id"))[1]
        gate = read_json(path / "infill.json").get("min_confidence")
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        model = _load_model(family, path, text, dev, dt)
        tokenizer, _, tok_source = load_tokenizer(path, path)
        fmt = None
        if tokenizer is not None:
            bos = text.bos_token_id if read_json(path / "tokenizer_config.json").get("add_bos_token") else None
            fmt = MaskInfillFormat.load(path, text.mask_token_id, bos)
        config = FamilyCheckpoint(text=text, sampler=settings, sources=sources, eos_token_ids=eos,
                                  canvas_length=min(fmt.canvas_lengths) if fmt else 32, min_confidence=gate)
        engine = cls(family, model, config, tokenizer, fmt, dev, dt, path)
        engine.tokenizer_source, engine.dual_cache = tok_source, dual
        return engine

    # -- what the checks read ------------------------------------------------------------------------------------
    def check_logits(self, context_ids: list[int], canvas_length: int) -> torch.Tensor:
        """(1, L, V) logits of the window a fill of `canvas_length` starts from (the checks before "ready")."""
        x, _ = self._window(context_ids, canvas_length, None)
        with torch.inference_mode():
            return self.model(x)

    def memory_report(self) -> dict[str, Any]:
        n = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return {"bytes": {self.weights: n},
                "lines": [f"weights {self.weights}: {n / 1e9:.2f} GB ({self.family.name} family; no KV cache is "
                          "kept: every step recomputes the whole window)"]}

    def kv_bytes(self, context_tokens: int) -> int:
        return 0  # nothing is kept between fills

    def kv_bytes_per_token(self) -> int:
        return 0

    def clear_prefix_cache(self) -> None:
        """Nothing is cached."""

    # -- filling -------------------------------------------------------------------------------------------------
    def _window(self, context_ids: list[int], length: int, seed_ids: tuple[int, ...] | None,
                level: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, int]:
        """(window (1, L) on the device, canvas start): the context's first mask id widened into `length` canvas
        positions (no mask id: the canvas goes at the end), all masks, or `seed_ids` with each position masked
        with probability `level` (drawn from a generator of its own: the sampler's draws stay upstream's)."""
        mask = self.config.text.mask_token_id
        at = context_ids.index(mask) if mask in context_ids else len(context_ids)
        canvas = torch.full((length,), mask, dtype=torch.long)
        if seed_ids is not None:
            u = torch.rand(length, generator=torch.Generator().manual_seed(seed ^ 0x5EED))
            canvas = torch.where(u < level, canvas, torch.tensor(seed_ids, dtype=torch.long))
        window = torch.cat([torch.tensor(context_ids[:at], dtype=torch.long), canvas,
                            torch.tensor(context_ids[at + 1:], dtype=torch.long)])
        return window[None].to(self.device), at

    def _refuse(self, entropy_bound: float | None, one_per_step: bool) -> None:
        f = self.family
        if entropy_bound is not None:
            raise ValueError(f"the {f.name} family has no entropy bound (its sampler settings: "
                             f"{', '.join(self.config.settings_in_force())})")
        if one_per_step:
            raise ValueError(f"the {f.name} family does not support one_per_step (set its sampler's steps)")

    @torch.inference_mode()
    def stream(self, context_ids: list[int], canvas_length: int | None = None, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, reference_compatible: bool = False,
               one_per_step: bool = False, draft_text: bool = True, init_ids: list[int] | None = None,
               start_noise: float = 1.0) -> Iterator[Draft]:
        """As `Engine.stream`; `reference_compatible` is always so (the upstream loop's arithmetic and draws)."""
        self._refuse(entropy_bound, one_per_step)
        if any(not 0 <= t < self.vocab_size for t in context_ids):
            raise ValueError(f"context ids must be in [0, {self.vocab_size})")
        if max_canvases < 1 or (canvas_length is not None and canvas_length <= 0):
            raise ValueError("max_canvases and canvas_length must be >= 1")
        # no block-autoregressive chain of canvases (Traits.multi_canvas): one canvas of their total length
        length = (canvas_length or self.config.canvas_length) * max_canvases
        text, eos = self.config.text, self.config.eos_token_ids
        seeds = seed_canvases(init_ids, start_noise, length, self.vocab_size, eos[0], text.pad_token_id)
        settings = self.config.sampler if steps is None else replace(self.config.sampler, steps=steps)
        t0 = time.perf_counter()
        x, start = self._window(list(context_ids), length, seeds[0] if seeds else None, start_noise, seed)
        sampler = self.family.sampler(settings, start, length, text.mask_token_id)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        probs: dict[int, float] = {}
        n = 0
        forward = (DualCache(self.model, self.dual_cache, sampler.active) if self.dual_cache
                   else lambda i, window: self.model(window))
        for out in denoise_masked(forward, x, text.mask_token_id, sampler, gen, cancel, lambda: self._lock):
            n += 1
            probs.update(out.revealed)
            canvas = [t for t in x[0, start:start + length].tolist() if t != text.mask_token_id]
            ids = cut_at_eos(canvas, eos, text.pad_token_id)[0]
            yield Draft(step=n, steps=sampler.steps, canvas=0, ids=ids, text=self._text(ids) if draft_text else "")
        cancelled = cancel is not None and cancel.cancelled
        canvas = x[0, start:start + length].tolist()
        ids, _ = cut_at_eos(canvas, eos, text.pad_token_id)
        kept = self._kept_probs(x, start, canvas, probs) if not cancelled else []
        total = time.perf_counter() - t0
        result = InfillResult(ids=[] if cancelled else ids, text="" if cancelled else self._text(ids), steps=n,
                              canvases=1, cancelled=cancelled, reused_prefix_tokens=0,
                              timings={"encode_ms": 0.0, "decode_ms": 1e3 * total, "total_ms": 1e3 * total},
                              tokens_accepted_per_step=len(probs) / max(n, 1),
                              confidence=None if cancelled else fill_confidence(kept), token_probs=kept)
        yield Draft(step=n, steps=sampler.steps, canvas=0, ids=result.ids, text=result.text, done=True,
                    result=result)

    def _kept_probs(self, x: torch.Tensor, start: int, canvas: list[int], probs: dict[int, float]) -> list[float]:
        """Each kept canvas token's probability when it was revealed (temperature 1); tokens that were never masked
        (a seeded canvas) are scored by one more pass over the final window. Pads before the end are skipped."""
        positions = []
        for i, t in enumerate(canvas):
            if t in self.config.eos_token_ids:  # the end of the fill is a prediction too
                positions.append(start + i)
                break
            if t != self.config.text.pad_token_id:
                positions.append(start + i)
        missing = [p for p in positions if p not in probs]
        if missing:
            with self._lock:
                logits = self.model(x)[0, missing].float()
            scored = torch.softmax(logits, -1).gather(-1, x[0, missing][:, None])[:, 0].tolist()
            probs = {**probs, **dict(zip(missing, scored, strict=True))}
        return [probs[p] for p in positions]

    def settings_in_force(self) -> dict[str, dict[str, Any]]:
        out = self.config.settings_in_force()
        out["dual_cache"] = {"value": self.dual_cache, "source": "setting" if self.dual_cache else "default"}
        out["family"] = {"value": self.family.name, "source": "config.json"}
        return out


def _load_model(family: MaskFamily, path: Path, text: Any, device: torch.device, dtype: torch.dtype) -> DenseLM:
    """Safetensors shards (plain, one file or an index); a reader of another format (GGUF) yields the same HF names
    into engine.families.checkpoint.load_dense."""
    from engine.families.checkpoint import load_dense

    return load_dense(tensors(path, checkpoint_files(path)), text, family.rename, device, dtype)
