"""Quantized weights (int8, int4, FP8, GGUF blocks): plan (the `weights` setting resolved per checkpoint and device,
the per-tensor conversion while loading), formats (quantize / dequantize / pack as tensor functions), modules
(QuantLinear, QuantWeight and their matmuls), cpu_matmul (their CPU matmuls: a weight repacked once, multiplied
in cache-sized dequantized tiles, only the routed experts), checkpoint (tensors read lazily, FP8 compressed-tensors
included), memory (weight memory from a config's shape, the fit check), kernel_check (the Triton MoE kernel
against its eager oracle under the interpreter)."""
