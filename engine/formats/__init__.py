"""Checkpoint formats beyond plain safetensors: llama.cpp GGUF (gguf.py reader, gguf_quants.py blocks,
gguf_write.py writer)."""
