"""Checkpoint formats beyond plain safetensors: llama.cpp GGUF (gguf reader, gguf_layout the byte layout checked
before any reader maps it, gguf_quants blocks, gguf_tokenizer the tokenizer from the file's metadata, gguf_write
writer, gguf_mdm Dream/LLaDA files read as their HF checkpoint) and hf_files (a loaded checkpoint's config written
back as the HF files a client reads)."""
