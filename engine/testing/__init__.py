"""Test helpers (never imported by product code): tiny (tiny checkpoints laid out like the real ones),
published (the published checkpoint's exact layout at a tiny size), families (tiny Dream, Open-dCoder and LLaDA
checkpoints in their published layouts, with the transformers reference of the same weights), gguf_twin (a GGUF's
safetensors twin at the GGUF's alignment), gguf_mdm_write (tiny Dream/LLaDA GGUFs as llama.cpp's converter writes
them)."""
