"""An FP8 checkpoint made by the published recipe (RedHat's llm-compressor `QuantizationModifier`: FP8_DYNAMIC on
Linear, ignoring lm_head, embeddings, router, vision tower and the self-conditioning MLP) is served as it is stored:
the ignored linears keep the file's bf16 weights. Checked step by step, with self-conditioning, against a reference
that applies the checkpoint's own scheme with the compressed-tensors library: W8A8 (e4m3 weights dequantized by the
library, activations fake-quantized per token by the library) on the stored-quantized linears, plain on the rest."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F
from quant_checkpoints import PUBLISHED_FP8_IGNORE, dequantized_copy, rel_err, write_fp8_checkpoint
from safetensors import safe_open
from torch import nn

from engine.engine import Engine
from engine.model.transformer import KVCache, map_name
from engine.quant.modules import QuantLinear, QuantWeight

STEPS = 6


@pytest.fixture(scope="module")
def published_fp8(tiny_ckpts, tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8_published")
    fp8 = write_fp8_checkpoint(tiny_ckpts["mixed"], root / "fp8", ignore=PUBLISHED_FP8_IGNORE, dtype=torch.bfloat16)
    return fp8, dequantized_copy(fp8, root / "deq")


def _input_args(path):
    from compressed_tensors.quantization import QuantizationConfig

    raw = json.loads((path / "config.json").read_text())["quantization_config"]
    group = next(iter(QuantizationConfig.model_validate(raw).config_groups.values()))
    return group.input_activations


def _quantized_keys(path) -> set[str]:
    """Our state-dict keys (experts fused) of the weights the file stores in e4m3 (they have a weight_scale)."""
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        names = [n[: -len("_scale")] for n in f.keys() if n.endswith(".weight_scale")]
    keys = set()
    for n in names:
        m = re.match(r"^(.*\.experts)\.\d+\.(gate|up|down)_proj\.weight$", n)
        if m:
            n = f"{m[1]}.{'down_proj' if m[2] == 'down' else 'gate_up_proj'}"
        keys.add(map_name(n))
    return keys


class _LibraryActQuant(nn.Module):
    """Per-token dynamic FP8 activations by the compressed-tensors library's own forward (forward_quantize)."""

    def __init__(self, args) -> None:
        super().__init__()
        from compressed_tensors.quantization import QuantizationStatus

        self.args, self.quantization_status = args, QuantizationStatus.FROZEN

    def act(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., K): one scale per row. The library's "token" strategy keeps dims 0 and 1 and reduces the rest, so
        a 2D input (the experts' sorted rows) goes in as (1, S, K), one token per row, as vLLM serves the scheme."""
        from compressed_tensors.quantization.lifecycle.forward import forward_quantize

        flat = x.reshape(1, -1, x.shape[-1])
        return forward_quantize(self, flat, "input", self.args).view(x.shape)


class W8A8Linear(_LibraryActQuant):
    def __init__(self, weight: torch.Tensor, args) -> None:
        super().__init__(args)
        self.w = weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.act(x), self.w)


class W8A8Experts(_LibraryActQuant):
    def __init__(self, weight: torch.Tensor, args) -> None:
        super().__init__(args)
        self.w, self.shape = weight, weight.shape

    def grouped_linear(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        from engine.model.moe import grouped_linear

        return grouped_linear(self.act(x), self.w, offsets, x.shape[0])


def w8a8_reference(deq_path, fp8_path) -> nn.Module:
    """The library-dequantized checkpoint with the library's activation quantization on exactly the linears the
    file stores quantized; the file's bf16 linears run as stored."""
    model = Engine.from_pretrained(deq_path, device="cpu", dtype="float32", weights="bf16").model
    args = _input_args(fp8_path)
    for key in _quantized_keys(fp8_path):
        path = key.removesuffix(".weight")
        parent_name, _, attr = path.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, attr)
        if isinstance(old, nn.Linear):
            new = W8A8Linear(old.weight.detach().clone(), args)
        else:
            new = W8A8Experts(old.detach().clone(), args)
        delattr(parent, attr)
        setattr(parent, attr, new)
    for mod in model.modules():  # undo the load-time stacking of q/k/v and gate/up: the wrappers run per linear
        if hasattr(mod, "qkv"):
            mod.qkv = None
        if hasattr(mod, "gate_up") and not isinstance(mod.gate_up, nn.Module):
            mod.gate_up = None
    return model


def self_conditioned_steps(model: nn.Module, steps: int = STEPS, seed: int = 0) -> list[torch.Tensor]:
    """Logits (1, C, V) of `steps` denoising steps on one context, each step fed the previous step's soft embedding
    (self-conditioning); the canvases are fixed random ids, the same for every model."""
    g = torch.Generator().manual_seed(seed)
    v = model.cfg.vocab_size
    ctx = torch.randint(0, v, (1, 24), generator=g)
    canvases = [torch.randint(0, v, (1, 16), generator=g) for _ in range(steps)]
    out, soft = [], None
    with torch.inference_mode():
        cache = model.encode(ctx, KVCache())
        for canvas in canvases:
            logits = model.decode(canvas, cache, soft)
            out.append(logits)
            soft = model.soft_embedding(torch.softmax(logits, dim=-1))
    return out


def test_published_recipe_keeps_ignored_linears_as_stored(published_fp8):
    fp8_path, _ = published_fp8
    with safe_open(str(fp8_path / "model.safetensors"), "pt") as f:
        dtypes = {n: f.get_slice(n).get_dtype() for n in f.keys()}
    assert dtypes["model.decoder.self_conditioning.gate_proj.weight"] == "BF16"
    assert "model.decoder.self_conditioning.gate_proj.weight_scale" not in dtypes
    assert dtypes["model.decoder.layers.0.self_attn.q_proj.weight"] == "F8_E4M3"
    eng = Engine.from_pretrained(fp8_path, device="cpu", dtype="float32")  # weights=auto
    assert eng.weights == "fp8"
    mlp = eng.model.self_conditioning.mlp
    for proj in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        assert type(proj) is nn.Linear
    assert isinstance(eng.model.layers[0].self_attn.q_proj, QuantLinear)
    assert isinstance(eng.model.layers[0].moe.gate_up_proj, QuantWeight)
    # the self-conditioning weights are the file's bf16 values, unrounded
    with safe_open(str(fp8_path / "model.safetensors"), "pt") as f:
        stored = f.get_tensor("model.decoder.self_conditioning.down_proj.weight")
    torch.testing.assert_close(mlp.down_proj.weight, stored.float(), rtol=0, atol=0)


def test_published_recipe_matches_its_w8a8_reference_at_every_self_conditioned_step(published_fp8):
    fp8_path, deq_path = published_fp8
    eng = Engine.from_pretrained(fp8_path, device="cpu", dtype="float32")
    ref = w8a8_reference(deq_path, fp8_path)
    got, want = self_conditioned_steps(eng.model), self_conditioned_steps(ref)
    errs = [rel_err(a, b) for a, b in zip(got, want, strict=True)]
    assert max(errs) < 1e-5, errs
