"""Denoising a canvas: denoise (the one step and its noise sources: counter-based for the fast path,
generate's draws for reference mode), runner (the one loop of steps: eager, compiled or CUDA graphs),
checked_runner (the runner built from the pieces that passed their self-check at load),
sampler (temperature, sampling, acceptance, the vocabulary pass), rng (counter-based random numbers), masked (the one
loop of mask-diffusion families, their samplers as a parameter: engine/families)."""
