#!/usr/bin/env bash
# The engine suite on one CUDA device in a single call (budget: under 8 minutes): the DiffusionGemma 26B-A4B text
# shape with random bf16 weights built on the GPU (no files), its weight-streaming floor, the denoising step with
# CUDA graphs on and off at canvas 256 / 16 steps (ms per step against the floor, tokens/s), cold encodes of 4k and
# 32k contexts, the step/context sweeps, transformers' generate on the same tensors, then the shipped default
# model. Sized for an 80 GB card (see bench/gpu_suite.py). Writes JSON, PNGs and gpu.md into $OUT
# (default ./bench/results/gpu). First `dg-lsp doctor --json` on the shipped model (versions, the GPU self-checks,
# a timed fill, the streaming floor): bench/results/doctor_<card>.json (a dry run: $OUT/doctor_dry_run.json).
# Under 10 minutes in all (doctor 90 s at most, the suite 470 s).
#
#   bench/gpu.sh             # on a machine with a CUDA device
#   bench/gpu.sh --dry-run   # the same Python on CPU with a tiny shape (seconds): checks the code path
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./bench/results/gpu}"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
if [ "${1:-}" = "--dry-run" ]; then
  DOCTOR="$OUT/doctor_dry_run.json"; DEVICE=cpu
else
  CARD="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -cs 'A-Za-z0-9' '_' | sed 's/_$//')"
  DOCTOR="bench/results/doctor_${CARD:-cuda}.json"; DEVICE=cuda
fi
# exit 1 when a GPU piece fell back: the report is what we want then, so the suite runs on
timeout 90 "$PYTHON" -m dg_lsp doctor --json --device "$DEVICE" > "$DOCTOR" || echo "doctor: exit $? (see $DOCTOR)"
# A hard stop under the 8-minute budget; the suite writes its files at the end, so leave it room.
exec timeout 470 "$PYTHON" -m bench.gpu_suite --out "$OUT" "$@"
