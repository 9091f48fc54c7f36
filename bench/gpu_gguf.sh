#!/usr/bin/env bash
# The GGUF path on one CUDA device in a single call (budget: under 6 minutes), for a session that is lent one:
# the Triton ggml-block kernel against its eager oracle on CUDA, each quant type's logits served packed on the
# device against F32 (the shipped model written as GGUF: Q8_0 against bf16 is the issue's figure), and the decoder
# step of the 26B-A4B shape with Q8_0 / Q4_K_M blocks against bf16 and the weight-streaming floor. Writes JSON into
# $OUT (default ./bench/results/gpu); first `dg-lsp doctor --json` on the shipped model written as a Q4_K_M GGUF (the
# gguf_moe self-checks run on it; its tokenizer comes from the file's metadata): bench/results/doctor_<card>_gguf.json (a dry run: $OUT/doctor_gguf_dry_run.json).
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
if [ "$DEVICE" = cpu ]; then
  DOCTOR="$OUT/doctor_gguf_dry_run.json"
else
  CARD="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -cs 'A-Za-z0-9' '_' | sed 's/_$//')"
  DOCTOR="bench/results/doctor_${CARD:-cuda}_gguf.json"
fi
GGUF="$(mktemp -d)/default-Q4_K_M.gguf"
timeout 60 "$PYTHON" -c "import sys; from engine.engine import default_model_path; from engine.formats.gguf_write \
import write_gguf, q4_k_m_type; write_gguf(default_model_path(), sys.argv[1], q4_k_m_type)" "$GGUF"
timeout 90 "$PYTHON" -m dg_lsp doctor --json --device "$DEVICE" --model "$GGUF" > "$DOCTOR" \
  || echo "doctor: exit $? (see $DOCTOR)"
timeout 120 "$PYTHON" -m pytest -q -p no:randomly tests/quant/test_gguf_kernel.py | tail -3
timeout 120 "$PYTHON" -m bench.gguf --logits-only --device "$DEVICE" | tail -1 > "$OUT/gguf_logits.json"
timeout 240 "$PYTHON" -m bench.gpu_quant --formats bf16,gguf:Q8_0,gguf:Q4_K_M --out "$OUT" "${EXTRA[@]}" | tail -1 \
  > "$OUT/gguf_step.json"
cat "$OUT/gguf_logits.json" "$OUT/gguf_step.json"
