"""Test helpers (never imported by product code): tiny (tiny checkpoints laid out like the real ones),
published (the published checkpoint's exact layout at a tiny size), gguf_twin (a GGUF's safetensors twin at the
GGUF's alignment)."""
