"""dg-lsp's diffusion engine: loads DiffusionGemma checkpoints once and fills infill canvases."""
