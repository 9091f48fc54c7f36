"""dg-lsp: a language server that fills code holes with a text-diffusion LLM."""
