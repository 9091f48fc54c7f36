"""What every model family provides, and what the engine's shared parts need of it.

A family is recognised by its config.json (`recognises`), says which shared parts it works with (`Traits`: the
prompt formats, the weight formats the quantizers can give it, whether a causal context lets the prefix KV cache
reuse work across fills, which kind of noise its denoising loop starts from), and for mask-diffusion families
gives the pieces of its own folder: config reading (config.json + tokenizer files -> `DenseConfig`), weight names
(checkpoint name -> `DenseLM` key) and its default sampler (a settings dataclass under the upstream names, and the
`MaskSampler` the one masked denoising loop runs with, engine.denoising.masked).

What the mask engine needs of a network is `MaskModel`: ids over the whole window in, one logit row per position
out, already aligned (row i predicts position i; a family whose logits are shifted shifts them in its forward),
and for the opt-in dual cache the same predictions for a range of rows against a full pass's K/V.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from engine.denoising.masked import MaskSampler
from engine.families.dense import DenseConfig, WindowKV


@dataclass(frozen=True)
class Traits:
    """Which shared parts a family works with; the engine refuses the rest by name (`refuse`)."""

    noise: Literal["uniform", "mask"]  # uniform-noise canvases (DiffusionGemma) or mask tokens
    prompt_formats: tuple[str, ...]  # engine.prompts names this family's checkpoints can be prompted with
    weight_formats: tuple[str, ...]  # engine.quant.formats names its weights may be stored in
    prefix_cache: bool  # a causal context encoder whose KV cache later fills reuse
    multi_canvas: bool  # canvases chained block-autoregressively (else max_canvases > 1 is one longer canvas)

    def refuse(self, family: str, what: str, value: object, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            raise ValueError(f"the {family} family does not support {what} {value!r} (it supports: "
                             f"{', '.join(allowed)})")


class MaskModel(Protocol):
    """The network the masked loop runs: (1, T) ids -> (1, T, V) logits, row i the prediction for position i
    (engine.families.dense.DenseLM is the one the Qwen2 and Llama families share)."""

    cfg: DenseConfig

    def __call__(self, ids: torch.Tensor, kv: WindowKV | None = None) -> torch.Tensor:
        """An empty `kv` is filled with every layer's K/V of the window (for `rows`)."""
        ...

    def rows(self, ids: torch.Tensor, a: int, b: int, kv: WindowKV) -> torch.Tensor:
        """(1, b - a, V) predictions for positions a .. b against `kv` (the dual cache)."""
        ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


class Family(Protocol):
    """The registry's view of a family (engine.families.registry)."""

    @property
    def name(self) -> str: ...

    @property
    def traits(self) -> Traits: ...

    def recognises(self, raw: Mapping[str, Any], path: Path) -> bool:
        """Whether config.json (`raw`, in checkpoint directory `path`) is one of this family's."""
        ...


@dataclass(frozen=True)
class MaskFamily:
    """A mask-diffusion family: everything its folder provides, as data (see the module docstring)."""

    name: str
    traits: Traits
    recognises: Callable[[Mapping[str, Any], Path], bool]
    read_config: Callable[[Path], DenseConfig]  # config.json + tokenizer files (the mask id) -> network config
    # a config.json body + mask id + eos ids -> network config: what another format's reader (GGUF) plugs into,
    # with engine.families.checkpoint.load_dense for its HF-named tensors
    dense_config: Callable[[Mapping[str, Any], int, tuple[int, ...]], DenseConfig]
    rename: Callable[[str], str | None]  # checkpoint tensor name -> DenseLM state-dict key (None: skipped)
    settings: type  # its sampler settings dataclass, fields named as upstream names them
    sampler: Callable[..., MaskSampler]  # (settings, canvas start, canvas length, mask id) -> MaskSampler
