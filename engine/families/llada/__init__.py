"""The LLaDA family: a Llama-style network (one KV head per head, no bias, untied head, OLMo-style tensor names)
trained as a mask-diffusion model. Modules: config (which config.json is one, its network config, its tensor
names), sampler (LLaDA's `generate` rule, the family's default sampler). The forward pass is engine.families.dense
without bias and with unshifted logits."""

from engine.families.contract import MaskFamily, Traits
from engine.families.llada.config import dense_config, read_config, recognises, rename
from engine.families.llada.sampler import LLaDASampler, LLaDASampling

FAMILY = MaskFamily(
    name="llada",
    traits=Traits(noise="mask", prompt_formats=("mask",), weight_formats=("bf16",), prefix_cache=False,
                  multi_canvas=False),
    recognises=recognises, read_config=read_config, dense_config=dense_config,
    rename=rename, settings=LLaDASampling, sampler=LLaDASampler)
