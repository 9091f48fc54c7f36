"""The Dream family: Qwen2 networks trained as mask-diffusion models (Dream, Dream-Coder, DiffuCoder, Open-dCoder).
Modules: config (which config.json is one, its network config, its tensor names), sampler (Dream's
`diffusion_generate` rule, the family's default sampler). The forward pass is engine.families.dense with QKV bias
and logits shifted right by one."""

from engine.families.contract import MaskFamily, Traits
from engine.families.qwen2_dream.config import dense_config, read_config, recognises, rename
from engine.families.qwen2_dream.sampler import DreamSampler, DreamSampling

FAMILY = MaskFamily(
    name="dream",
    traits=Traits(noise="mask", prompt_formats=("mask",), weight_formats=("bf16",), prefix_cache=False,
                  multi_canvas=False),
    recognises=recognises, read_config=read_config, dense_config=dense_config,
    rename=rename, settings=DreamSampling, sampler=DreamSampler)
