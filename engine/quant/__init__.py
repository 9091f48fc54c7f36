"""Quantized weights (int8, int4, FP8, GGUF blocks): plan (the `weights` setting resolved per checkpoint and device,
the per-tensor conversion while loading), formats (quantize / dequantize / pack as tensor functions), modules
(QuantLinear, QuantWeight, QuantTable and their matmuls), cpu_matmul (their CPU matmuls: ggml weights read in place
by the native kernels, others repacked once; multiplied in cache-sized dequantized tiles or, natively, row by row
for few rows of x; only the routed experts), native/ (the C kernels for ggml rows, built once per machine),
checkpoint (tensors read lazily, FP8 compressed-tensors
included), memory (weight memory from a config's shape, the fit check), kernel_check (the Triton MoE kernel
against its eager oracle under the interpreter)."""
