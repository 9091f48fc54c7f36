"""Model families: one place per family, one contract they all meet, one registry line each.

Modules: contract (what a family provides and what the shared denoising loop, prompt formats, quantizers and
prefix cache need of it: `Traits`, `MaskModel`, `Family`, `MaskFamily`), registry (the families, one line each,
and which one a checkpoint's config.json is), diffusion_gemma (the adapter for the first family, whose network
stays in engine/model/), dense (the full-attention Qwen2/Llama network the mask-diffusion families share),
checkpoint (their config, tokenizer mask id, sampler settings and weights, family-independent), mask_engine (the
embedded engine for mask-diffusion families, behind the same seam), dual_cache (Fast-dLLM's approximate dual
cache, opt-in), gguf (llama.cpp's dream / llada GGUF files: which family a GGUF is, and its engine). Folders:
qwen2_dream (Dream, Dream-Coder, DiffuCoder, Open-dCoder), llada (LLaDA): each its config reading, weight names
and default sampler."""
