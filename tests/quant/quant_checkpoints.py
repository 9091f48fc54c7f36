"""Checkpoint builders for the quantization tests (imported by name: a module called conftest is ambiguous
across test folders): tiny random ones (transformers), the same in bf16 shards, a larger random
one written shard by shard (for peak memory), and a compressed-tensors FP8 one written with the library; and the
logits / dequantized twin the tests compare."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from engine.model.transformer import KVCache

os.environ.setdefault("HF_HUB_OFFLINE", "1")


_LINEAR = re.compile(r"^(?!.*vision).*_proj\.weight$")
_EXPERTS = re.compile(r"^(?P<prefix>.*\.experts)\.(?P<proj>gate_up_proj|down_proj)$")


def _copy_side_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix == ".json" and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)


def write_shards(tensors: dict[str, torch.Tensor], dst: Path, shard_bytes: int) -> None:
    """Sharded safetensors with an index, at most ~shard_bytes per file (a bigger tensor gets a file of its own)."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        if size and size + t.nbytes > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t.contiguous()
        size += t.nbytes
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(dst / fname))
        weight_map.update({n: fname for n in shard})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def to_bf16_shards(src: Path, dst: Path, shard_bytes: int = 1 << 16) -> Path:
    """A copy of a single-file checkpoint in bf16 shards (the published checkpoints' layout and dtype)."""
    _copy_side_files(src, dst)
    write_shards({k: v.to(torch.bfloat16) for k, v in load_file(str(src / "model.safetensors")).items()}, dst,
                 shard_bytes)
    return dst


def big_bf16_checkpoint(dst: Path, shape: dict, shard_bytes: int, seed: int = 0) -> Path:
    """A random bf16 checkpoint of `shape` written straight from the meta model's names, one shard in memory at a
    time (no full model is ever built)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from engine.testing.tiny import TINY_VISION

    dst.mkdir(parents=True, exist_ok=True)
    config = DiffusionGemmaConfig(text_config=dict(shape, max_position_embeddings=4096),
                                  vision_config=dict(TINY_VISION), canvas_length=16)
    config.save_pretrained(dst)
    with torch.device("meta"):
        meta = DiffusionGemmaForBlockDiffusion(config)
    # persistent tensors, without the encoder's tied copies (as save_pretrained writes them)
    names = {n: t for n, t in meta.state_dict().items()
             if not n.startswith("model.encoder.language_model.") or n.endswith("layer_scalar")}
    g = torch.Generator().manual_seed(seed)
    shards: list[list[str]] = [[]]
    size = 0
    for name, t in names.items():
        nbytes = t.numel() * 2
        if size and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        body = {}
        for n in shard:
            s = names[n].shape
            body[n] = ((torch.randn(s, generator=g) / max(s[-1], 1) ** 0.5) if len(s) > 1
                       else 1.0 + 0.1 * torch.randn(s, generator=g)).to(torch.bfloat16)
        save_file(body, str(dst / fname))
        weight_map.update({n: fname for n in shard})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dst


def _linear(weight: torch.Tensor) -> nn.Linear:
    m = nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=weight.dtype)
    m.weight.data.copy_(weight)
    return m


def _set(root: nn.Module, path: str, module: nn.Module) -> None:
    *parents, leaf = path.split(".")
    node = root
    for p in parents:
        if not hasattr(node, p):
            node.add_module(p, nn.Module())
        node = getattr(node, p)
    node.add_module(leaf, module)


# The ignore list of RedHat's published FP8 checkpoint (its model card's llm-compressor recipe).
PUBLISHED_FP8_IGNORE = ("lm_head", "re:.*embed.*", "re:.*router", "re:.*vision_tower.*", "re:.*self_conditioning.*")


def write_fp8_checkpoint(src: Path, dst: Path, ignore: tuple[str, ...] = ("re:.*router.*",),
                         dtype: torch.dtype | None = None) -> Path:
    """The checkpoint at `src` as a compressed-tensors FP8-dynamic checkpoint, written by the compressed-tensors
    library: every linear not matched by `ignore` (module names or "re:" patterns, as in an llm-compressor recipe)
    and outside the vision tower gets e4m3 weights with per-channel scales; ignored ones keep their weights. The
    fused experts become per-expert linears (`experts.{e}.{gate,up,down}_proj`), as the library writes them.
    `dtype`: cast every tensor first (bf16: the published checkpoints' source, so ignored linears stay bf16)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    _copy_side_files(src, dst)
    root, passthrough = nn.Module(), {}
    for name, t in load_file(str(src / "model.safetensors")).items():
        t = t.to(dtype) if dtype is not None and t.is_floating_point() else t
        m = _EXPERTS.match(name)
        if m and t.dim() == 3:
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                if m["proj"] == "gate_up_proj":
                    _set(root, f"{m['prefix']}.{e}.gate_proj", _linear(t[e, :inter]))
                    _set(root, f"{m['prefix']}.{e}.up_proj", _linear(t[e, inter:]))
                else:
                    _set(root, f"{m['prefix']}.{e}.down_proj", _linear(t[e]))
        elif _LINEAR.match(name) and t.dim() == 2:
            _set(root, name[: -len(".weight")], _linear(t))
        else:
            passthrough[name] = t
    cfg = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme("FP8_DYNAMIC", ["Linear"])},
                             ignore=list(ignore), format="float-quantized")
    apply_quantization_config(root, cfg)
    for _, module in root.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is not None:  # the observer's job in llm-compressor: per-channel min/max -> scale
            w = module.weight.data
            scale, _ = calculate_qparams(w.amin(1, keepdim=True), w.amax(1, keepdim=True), scheme.weights)
            module.weight_scale.data.copy_(scale)
    compressor = ModelCompressor.from_pretrained_model(root, "float-quantized")
    compressor.compress_model(root)
    state = {k: v for k, v in root.state_dict().items() if not k.endswith("weight_zero_point")}
    save_file({**state, **passthrough}, str(dst / "model.safetensors"))
    compressor.update_config(str(dst))
    return dst


def dequantized_copy(src: Path, dst: Path) -> Path:
    """A plain checkpoint from a compressed-tensors FP8 one: each e4m3 weight dequantized by the compressed-tensors
    library (`dequantize`, in fp32), the per-expert linears fused back. The reference an FP8 load must match."""
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    _copy_side_files(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    args = next(iter(QuantizationConfig.model_validate(cfg.pop("quantization_config")).config_groups.values())).weights
    (dst / "config.json").write_text(json.dumps(cfg))
    raw = load_file(str(src / "model.safetensors"))
    plain, experts = {}, {}
    for name, t in raw.items():
        if name.endswith("weight_scale"):
            continue
        if t.dtype == torch.float8_e4m3fn:
            # fp32 scale: a bf16 one (a bf16 source's) would round each product to bf16; vLLM scales in fp32
            t = dequantize(t, raw[name[: -len("weight")] + "weight_scale"].float(), args=args, dtype=torch.float32)
        m = re.match(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", name)
        if m:
            experts.setdefault(m[1], {})[(m[3], int(m[2]))] = t
        else:
            plain[name] = t
    for prefix, pieces in experts.items():
        n = 1 + max(e for _, e in pieces)
        plain[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([pieces[("gate_proj", e)], pieces[("up_proj", e)]]) for e in range(n)])
        plain[f"{prefix}.down_proj"] = torch.stack([pieces[("down_proj", e)] for e in range(n)])
    save_file(plain, str(dst / "model.safetensors"))
    return dst


# -- what the tests compare -----------------------------------------------------------------------------------
def logits(engine, seed: int = 0) -> torch.Tensor:
    """Decoder logits (1, 16, V) of an Engine (or a bare model) on random context and canvas ids."""
    model = getattr(engine, "model", engine)
    g = torch.Generator().manual_seed(seed)
    v = model.cfg.vocab_size
    ctx = torch.randint(0, v, (1, 24), generator=g)
    canvas = torch.randint(0, v, (1, 16), generator=g)
    with torch.inference_mode():
        return model.decode(canvas, model.encode(ctx, KVCache()), None)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def dequantized_twin(engine) -> nn.Module:
    """The engine's model with every quantized module replaced by plain fp32 weights equal to its dequantization."""
    import copy

    from engine.quant.modules import QuantLinear, QuantWeight

    twin = copy.deepcopy(engine.model)
    for name, m in list(twin.named_modules()):
        if isinstance(m, QuantWeight):
            parent_name, _, attr = name.rpartition(".")
            parent = twin.get_submodule(parent_name)
            w = m.dequantize(torch.float32)
            delattr(parent, attr)
            if isinstance(m, QuantLinear):
                lin = nn.Linear(w.shape[1], w.shape[0], bias=m.bias is not None)
                lin.weight.data.copy_(w)
                if m.bias is not None:
                    lin.bias.data.copy_(m.bias)
                setattr(parent, attr, lin)
            else:
                setattr(parent, attr, nn.Parameter(w, requires_grad=False))
    return twin
