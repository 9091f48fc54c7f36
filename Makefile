# The README's commands. Each target creates .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo test test-py test-vscode bench lint train

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@# No NVIDIA GPU: take the CPU wheel of torch first (a plain `torch` would pull a multi-GB CUDA build).
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: installing the default (CUDA) torch"; \
	else \
		echo "no NVIDIA GPU: installing the CPU torch wheel"; $(BIN)/pip install -q torch==2.13.0; \
	fi

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/python -m dg_lsp.demo

test: test-py test-vscode

# pytest exits 5 when it collected nothing: make stops on any non-zero exit, so an empty run fails.
# Parallel workers (one per core, at most 4): most server tests wait on a child process, so 2 workers on 2 cores
# took the Python tier from 547 s to 300 s.
test-py: setup
	$(BIN)/python -m pytest -n auto --maxprocesses=4

# Extension unit tests, the .vsix, and the real-editor tier (code-server + chromium + the real server).
# DG_E2E=1 (the default here) installs the real-editor test bed on first use and fails if it cannot run.
test-vscode: setup
	DG_E2E=$${DG_E2E:-1} bash editors/vscode/scripts/test.sh

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python -m bench.run

# Retrain the shipped model from the standard library (about 2 h 50 min on 1 CPU thread; resumable: run it again
# to continue). One leg; the shipped run had two, with a schedule change between (engine/train/RECIPES.md).
train: setup
	$(BIN)/python -m engine.train.build_tokenizer --out runs/tok4k --vocab-size 4096
	OMP_NUM_THREADS=1 nice -n 10 $(BIN)/python -m engine.train.train --run-dir runs/main --tokenizer-dir runs/tok4k \
		--shape small --noise-draws 1 --total-steps 10500 --minutes 170 --threads 1
	$(BIN)/python -m engine.train.export --run-dir runs/main
