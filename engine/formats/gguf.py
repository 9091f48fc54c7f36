"""llama.cpp GGUF checkpoints of DiffusionGemma (architecture `diffusion-gemma`, llama.cpp PR #24423's converter)
read as the Hugging Face checkpoint they were converted from: memory-mapped with the gguf package's GGUFReader,
config and sampler defaults from the metadata, tensors renamed to their HF names and handed out one at a time.

The format belongs to an unmerged PR, so everything is checked before a byte of weight is read: the architecture,
the required keys (the shape, `diffusion.canvas_length`), the tensor set against the name map (missing and unknown
names listed), each tensor's ggml type (types without a dequantizer here, e.g. the IQ family, refused by name) and
extent (a truncated file is named, never a crash). Optional keys missing from the file are defaulted and listed in
`GGUFInfo.defaulted`. The converter keeps HF's layout: no permutes, no transposes, no norm offsets, fused experts
(gate rows first); the encoder is the decoder plus per-layer `enc_layer_output_scale` (../shared/GGUF.md §1).

A float tensor (F32/F16/BF16) reads as a torch tensor (F32 zero-copy over the map); a quantized one as
QuantParts of format "gguf:<TYPE>" whose qweight is the packed rows (..., N, row_bytes) uint8, zero-copy over the
map (engine.quant.plan keeps it packed under weights=auto, engine.formats.gguf_quants dequantizes it per call).
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.config import CheckpointConfig, LayerSpec, RopeSpec, SamplerDefaults, TextConfig, apply_overrides
from engine.formats.gguf_layout import LayoutError, check_layout
from engine.formats.gguf_quants import BLOCKS
from engine.quant.formats import QuantParts

ARCH = "diffusion-gemma"
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")
_LAYER = re.compile(r"^blk\.(?P<i>\d+)\.(?P<rest>.+)$")
# GGUF name -> HF name (../shared/GGUF.md §1, the #24423 converter's table, reversed)
MODEL_TENSORS = {
    "token_embd.weight": "model.decoder.embed_tokens.weight",
    "output_norm.weight": "model.decoder.norm.weight",
    "self_cond_pre_norm.weight": "model.decoder.self_conditioning.pre_norm.weight",
    "self_cond_gate.weight": "model.decoder.self_conditioning.gate_proj.weight",
    "self_cond_up.weight": "model.decoder.self_conditioning.up_proj.weight",
    "self_cond_down.weight": "model.decoder.self_conditioning.down_proj.weight",
}
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",  # sliding layers only (K = V on global ones)
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "post_ffw_norm_1.weight": "post_feedforward_layernorm_1.weight",
    "pre_ffw_norm_2.weight": "pre_feedforward_layernorm_2.weight",
    "ffn_gate_inp.weight": "router.proj.weight",
    "ffn_gate_inp.scale": "router.scale",
    "ffn_down_exps.scale": "router.per_expert_scale",
    "ffn_gate_up_exps.weight": "experts.gate_up_proj",
    "ffn_down_exps.weight": "experts.down_proj",
    "post_ffw_norm_2.weight": "post_feedforward_layernorm_2.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "layer_output_scale.weight": "layer_scalar",
}
IGNORED = {"rope_freqs.weight"}  # ggml's encoding of the partial rope, read into the config instead
SOURCE = "gguf metadata"
TOKENIZER_SOURCE = "tokenizer.ggml.* metadata of the GGUF (rebuilt)"
TEMPLATE_SOURCE = "tokenizer.chat_template of the GGUF"


class GGUFError(ValueError):
    """A GGUF file this engine cannot serve; the message names the file and what is wrong with it."""


def is_gguf(path: str | Path) -> bool:
    """A `.gguf` file, or a directory holding one and no config.json (a safetensors checkpoint wins)."""
    path = Path(path)
    if path.is_dir():
        return not (path / "config.json").is_file() and any(path.glob("*.gguf"))
    return path.suffix == ".gguf"


def gguf_files(path: str | Path) -> list[Path]:
    """The file(s) of one model: a `.gguf` file (every part of a `-0000i-of-0000N.gguf` split), or the one model
    in a directory."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        models = sorted({_SPLIT.sub(r"\g<stem>", f.name) for f in found})
        if len(models) != 1:
            raise GGUFError(f"{path} holds {len(models)} GGUF models ({', '.join(models) or 'none'}); give the file")
        path = found[0]
    if not path.is_file():
        raise GGUFError(f"{path}: no such GGUF file")
    m = _SPLIT.match(path.name)
    if m is None:
        return [path]
    n = int(m["n"])
    files = [path.with_name(f"{m['stem']}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise GGUFError(f"{path}: split parts missing: {', '.join(missing)}")
    return files


def file_tokenizer(path: str | Path):
    """The tokenizer rebuilt from the file's tokenizer.ggml.* metadata (engine.formats.gguf_tokenizer), or None when
    the file has none of a kind rebuilt."""
    return file_prompt(path)[0]


def file_prompt(path: str | Path, tokenizer: bool = True) -> tuple[Any, str | None, str]:
    """(tokenizer rebuilt from the metadata or None, `tokenizer.chat_template` or None, why there is no tokenizer
    ("" when there is one or none was asked for)) of a GGUF; one read of the header."""
    from engine.formats.gguf_tokenizer import tokenizer_from_fields, unsupported

    info = open_gguf(path)
    template = info.fields.get("tokenizer.chat_template") or None
    if not tokenizer:
        return None, template, ""
    why = unsupported(info.fields)
    tok = tokenizer_from_fields(info.fields, str(info.files[0])) if why is None else None
    return tok, template, why or ""


def tokenizer_dir(path: str | Path) -> Path:
    """Where the HF tokenizer.json / prompt files of a GGUF checkpoint are looked for: beside the file."""
    path = Path(path)
    return path if path.is_dir() else path.parent


@dataclass
class GGUFTensor:
    name: str  # GGUF name
    qtype: str  # ggml type name
    shape: tuple[int, ...]  # torch order (outermost first)
    nbytes: int
    data: Any  # numpy view over the map


@dataclass
class GGUFInfo:
    files: list[Path]
    fields: dict[str, Any]
    tensors: dict[str, GGUFTensor]
    defaulted: dict[str, Any] = field(default_factory=dict)  # optional key -> the default used

    def get(self, key: str, default: Any = None, required: bool = False) -> Any:
        if key in self.fields:
            return self.fields[key]
        if required:
            raise GGUFError(f"{self.files[0]}: required key {key!r} is missing")
        self.defaulted[key] = default
        return default

    def type_counts(self) -> dict[str, dict[str, int]]:
        """ggml type -> {"tensors": n, "bytes": b}, the file's mix."""
        out: dict[str, dict[str, int]] = {}
        for t in self.tensors.values():
            row = out.setdefault(t.qtype, {"tensors": 0, "bytes": 0})
            row["tensors"] += 1
            row["bytes"] += t.nbytes
        return out


def _read_fields(reader) -> dict[str, Any]:
    out = {}
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        try:
            out[name] = f.contents()
        except Exception as exc:  # noqa: BLE001 -- a malformed field of a PR-defined format: name it
            raise GGUFError(f"metadata key {name!r} cannot be read: {exc}") from exc
    return out


_reading = threading.local()


@contextmanager
def reading() -> Iterator[None]:
    """Within it, each GGUF file's header is parsed once: a load reads it for the family, the config, the weight
    plan, the tensors and the tokenizer, and every parse turns the whole vocabulary into Python objects whose freed
    memory stays fragmented in the process (~10 MB per parse for a 32k vocabulary)."""
    outer = getattr(_reading, "parsed", None)
    if outer is None:
        _reading.parsed = {}
    try:
        yield
    finally:
        if outer is None:
            _reading.parsed = None


def _parsed(files: list[Path]) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
    """(fields of the first file, tensors of all) of a checked file set, once per `reading()`."""
    cache = getattr(_reading, "parsed", None)
    key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    if cache is not None and key in cache:
        return cache[key]
    out = _parse(files)
    if cache is not None:
        cache[key] = out
    return out


def _parse(files: list[Path]) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
    from gguf import GGUFReader

    fields: dict[str, Any] = {}
    tensors: dict[str, GGUFTensor] = {}
    for i, f in enumerate(files):
        try:  # bounds, dimensions and extents first: the reader's own failures name no tensor
            check_layout(f)
        except LayoutError as exc:
            raise GGUFError(f"{f}: {exc}") from None
        try:
            reader = GGUFReader(f, "c")  # copy-on-write map: writable numpy views, pages shared with the file
            part_fields = _read_fields(reader)
        except GGUFError as exc:
            raise GGUFError(f"{f}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 -- what check_layout does not check (e.g. a key's bytes)
            raise GGUFError(f"{f}: not a readable GGUF file ({type(exc).__name__}: {exc})") from None
        if i == 0:
            fields = part_fields
        size = f.stat().st_size
        for t in reader.tensors:
            qtype = t.tensor_type.name
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
                raise GGUFError(f"{f}: truncated: tensor {t.name} ends at byte {t.data_offset + t.n_bytes}, the "
                                f"file has {size}")
            if t.name in tensors:
                raise GGUFError(f"{f}: tensor {t.name} appears twice")
            tensors[t.name] = GGUFTensor(t.name, qtype, shape, int(t.n_bytes), t.data)
    return fields, tensors


def architecture(path: str | Path) -> str | None:
    """`general.architecture` of the GGUF at `path` (a file, or a directory holding one); None when it cannot be
    read (the loader then names what is wrong with the file)."""
    try:
        return _parsed(gguf_files(path))[0].get("general.architecture")
    except Exception:  # noqa: BLE001 -- a broken file: open_gguf's own message is the better one
        return None


def open_gguf(path: str | Path, arch: str | tuple[str, ...] = ARCH) -> GGUFInfo:
    """Map the file(s) and check the architecture (`arch`: the one, or ones, accepted), the tensor types and
    extents. Raises GGUFError."""
    files = gguf_files(path)
    fields, tensors = _parsed(files)
    found = fields.get("general.architecture")
    if found != arch and not (isinstance(arch, tuple) and found in arch):
        want = f"{arch!r} (llama.cpp PR #24423's DiffusionGemma)" if arch == ARCH else (
            f"one of {', '.join(arch)}" if isinstance(arch, tuple) else repr(arch))
        raise GGUFError(f"{files[0]}: architecture {found!r} is not {want}")
    bad = {n: t.qtype for n, t in tensors.items() if t.qtype not in BLOCKS}
    if bad:
        kinds = ", ".join(sorted(set(bad.values())))
        raise GGUFError(f"{files[0]}: ggml types {kinds} are not supported (supported: {', '.join(BLOCKS)}); "
                        f"tensors: {', '.join(sorted(bad)[:8])}{' ...' if len(bad) > 8 else ''}")
    return GGUFInfo(files, dict(fields), dict(tensors))


def _per_layer(value: Any, n: int, key: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise GGUFError(f"{key}: {len(values)} entries for {n} layers")
    return values


def text_config(info: GGUFInfo) -> TextConfig:
    """The engine's TextConfig from the metadata (HF DiffusionGemmaTextConfig fields under llama.cpp's keys)."""
    a = f"{ARCH}."
    need = lambda key: info.get(a + key, required=True)  # noqa: E731
    n = int(need("block_count"))
    sliding = [bool(s) for s in _per_layer(need("attention.sliding_window_pattern"), n, "sliding_window_pattern")]
    kv = [int(h) for h in _per_layer(need("attention.head_count_kv"), n, "attention.head_count_kv")]
    hd_full, hd_swa = int(need("attention.key_length")), int(need("attention.key_length_swa"))
    embd = info.tensors.get("token_embd.weight")
    if embd is None:
        raise GGUFError(f"{info.files[0]}: tensor token_embd.weight is missing")
    rope_freqs = info.tensors.get("rope_freqs.weight")
    if rope_freqs is not None:  # [1.0] * rotated pairs + [1e30] * the rest: ggml NEOX's partial rope
        factors = np.asarray(rope_freqs.data, dtype=np.float32).reshape(-1)
        partial = float((factors == 1.0).sum()) / factors.size
    else:
        partial = info.get("(tensor) rope_freqs.weight: partial_rotary_factor of global layers", 0.25)
    rope = {
        "sliding_attention": RopeSpec("default", float(info.get(a + "rope.freq_base_swa", 10_000.0))),
        "full_attention": RopeSpec("proportional", float(info.get(a + "rope.freq_base", 1_000_000.0)), partial),
    }
    softcap = info.get(a + "final_logit_softcapping", 30.0)
    # stop ids: eos plus end-of-turn / end-of-message where the file names them (the model's stop set is [1, 106, 50])
    eos = [int(info.get("tokenizer.ggml.eos_token_id", 1))]
    eos += [int(info.fields[k]) for k in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
            if k in info.fields and int(info.fields[k]) not in eos]
    return TextConfig(
        vocab_size=embd.shape[0], hidden_size=int(need("embedding_length")),
        intermediate_size=int(need("feed_forward_length")), num_hidden_layers=n,
        num_attention_heads=int(need("attention.head_count")),
        layer_types=tuple("sliding_attention" if s else "full_attention" for s in sliding),
        layers=tuple(LayerSpec(s, hd_swa if s else hd_full, h) for s, h in zip(sliding, kv, strict=True)),
        rope=rope, sliding_window=int(need("attention.sliding_window")), num_experts=int(need("expert_count")),
        top_k_experts=int(need("expert_used_count")), moe_intermediate_size=int(need("expert_feed_forward_length")),
        rms_norm_eps=float(info.get(a + "attention.layer_norm_rms_epsilon", 1e-6)),
        final_logit_softcapping=float(softcap) if softcap else None, tie_word_embeddings=True,
        pad_token_id=int(info.get("tokenizer.ggml.padding_token_id", 0)), eos_token_ids=tuple(eos),
        bos_token_id=int(info.get("tokenizer.ggml.bos_token_id", 2)),
        max_position_embeddings=int(info.get(a + "context_length", 131_072)),
    )


# diffusion.eb_* -> SamplerDefaults field (llama.cpp writes them from generation_config.json when it has them)
SAMPLER_KEYS = {"diffusion.eb_max_steps": "max_denoising_steps", "diffusion.eb_t_min": "t_min",
                "diffusion.eb_t_max": "t_max", "diffusion.eb_entropy_bound": "entropy_bound",
                "diffusion.eb_stability_threshold": "stability_threshold",
                "diffusion.eb_confidence_threshold": "confidence_threshold"}


def checkpoint_config(info: GGUFInfo, overrides: Mapping[str, Any] | None = None) -> CheckpointConfig:
    """CheckpointConfig: the text config, `diffusion.canvas_length` (required), sampler defaults from
    `diffusion.eb_*` (source "gguf metadata"; missing ones keep the reference defaults, listed as defaulted), then
    `overrides` (engine.config.apply_overrides)."""
    text = text_config(info)
    canvas = int(info.get("diffusion.canvas_length", required=True))
    if canvas <= 0:
        raise GGUFError(f"{info.files[0]}: diffusion.canvas_length must be > 0, got {canvas}")
    given, sources = {}, {}
    defaults = SamplerDefaults()
    for key, name in SAMPLER_KEYS.items():
        value = info.get(key, getattr(defaults, name))
        if key in info.fields:
            given[name], sources[name] = type(getattr(defaults, name))(value), SOURCE
    sampler, sources = apply_overrides(replace(defaults, **given), sources, overrides)
    sources.update(eos_token_ids=SOURCE, canvas_length=SOURCE)
    return CheckpointConfig(text=text, canvas_length=canvas, sampler=sampler, eos_token_ids=text.eos_token_ids,
                            sources=sources)


def expected_names(cfg) -> set[str]:
    """The GGUF tensor names a checkpoint of `cfg` has (v only on sliding layers)."""
    names = set(MODEL_TENSORS)
    for i, spec in enumerate(cfg.layers):
        names |= {f"blk.{i}.{k}" for k in LAYER_TENSORS if k != "attn_v.weight" or spec.sliding}
        names.add(f"blk.{i}.enc_layer_output_scale.weight")
    return names


def hf_name(name: str) -> str | None:
    """GGUF tensor name -> the HF checkpoint name it was converted from (None: not in the map)."""
    if name in MODEL_TENSORS:
        return MODEL_TENSORS[name]
    m = _LAYER.match(name)
    if m is None:
        return None
    if m["rest"] == "enc_layer_output_scale.weight":
        return f"model.encoder.language_model.layers.{m['i']}.layer_scalar"
    rest = LAYER_TENSORS.get(m["rest"])
    return f"model.decoder.layers.{m['i']}.{rest}" if rest else None


def check_tensor_set(info: GGUFInfo, cfg) -> None:
    want = expected_names(cfg)
    have = set(info.tensors) - IGNORED
    missing, unknown = sorted(want - have), sorted(have - want)
    if missing or unknown:
        raise GGUFError(f"{info.files[0]}: tensor set does not match {ARCH} with {cfg.num_hidden_layers} layers: "
                        f"missing {missing[:12]}{' ...' if len(missing) > 12 else ''}; unknown {unknown[:12]}"
                        f"{' ...' if len(unknown) > 12 else ''}")


def _read(t: GGUFTensor) -> torch.Tensor | QuantParts:
    with warnings.catch_warnings():  # numpy views of a copy-on-write map are writable; belt and braces
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.from_numpy(np.asarray(t.data))
    if t.qtype == "F32":
        return raw.reshape(t.shape)
    if t.qtype in ("F16", "BF16"):
        return raw.view(torch.float16 if t.qtype == "F16" else torch.bfloat16).reshape(t.shape)
    return QuantParts(f"gguf:{t.qtype}", t.shape, raw.reshape(*t.shape[:-1], -1), torch.empty(0))


def tensors(path: str | Path, cfg) -> Iterator[tuple[str, tuple[int, ...], Callable[[], Any]]]:
    """(HF name, torch shape, read) for every weight of the checkpoint, after the whole tensor set is checked."""
    info = open_gguf(path)
    check_tensor_set(info, cfg)
    for name, t in info.tensors.items():
        if name in IGNORED:
            continue
        yield hf_name(name), t.shape, (lambda t=t: _read(t))


def summary(path: str | Path) -> dict[str, Any]:
    """What `dg-lsp --check` shows: the files, per-type tensor counts and bytes, and the optional keys defaulted."""
    info = open_gguf(path)
    checkpoint_config(info)
    counts = info.type_counts()
    return {"format": "gguf", "files": [str(f) for f in info.files], "file_type": info.fields.get("general.file_type"),
            "tensor_types": counts, "tensors": sum(c["tensors"] for c in counts.values()),
            "defaulted_keys": sorted(info.defaulted)}
