"""Native CPU kernels for quantized weights: ggml rows dequantized straight from their stored blocks.

Modules: dequant.c (the kernels), build.py (compiles it once per machine, loads it; optional), ops.py (the calls on
torch tensors).
"""
