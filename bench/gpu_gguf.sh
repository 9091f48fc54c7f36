#!/usr/bin/env bash
# The GGUF path on one CUDA device in a single call (budget: under 6 minutes), for a session that is lent one:
# the Triton ggml-block kernel against its eager oracle on CUDA, each quant type's logits served packed on the
# device against F32 (the shipped model written as GGUF: Q8_0 against bf16 is the issue's figure), and the decoder
# step of the 26B-A4B shape with Q8_0 / Q4_K_M blocks against bf16 and the weight-streaming floor. Writes JSON into
# $OUT (default ./bench/results/gpu).
#
#   bench/gpu_gguf.sh             # on a machine with a CUDA device
#   bench/gpu_gguf.sh --dry-run   # the same on CPU, tiny shapes (seconds): checks the code path
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./bench/results/gpu}"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
DEVICE=cuda; EXTRA=()
if [ "${1:-}" = "--dry-run" ]; then DEVICE=cpu; EXTRA=(--dry-run); export TRITON_INTERPRET=1; fi
timeout 120 "$PYTHON" -m pytest -q -p no:randomly tests/quant/test_gguf_kernel.py | tail -3
timeout 120 "$PYTHON" -m bench.gguf --logits-only --device "$DEVICE" | tail -1 > "$OUT/gguf_logits.json"
timeout 240 "$PYTHON" -m bench.gpu_quant --formats bf16,gguf:Q8_0,gguf:Q4_K_M --out "$OUT" "${EXTRA[@]}" | tail -1 \
  > "$OUT/gguf_step.json"
cat "$OUT/gguf_logits.json" "$OUT/gguf_step.json"
