# The README's commands. Each target creates .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo test test-py test-vscode typecheck bench lint train vllm-contract

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@# torch first, chosen as the user install chooses it (scripts/install.py): the CPU build without an NVIDIA GPU
	@# (PyPI's Linux torch is a CUDA build with ~3 GB of NVIDIA packages), the CUDA build with one. Its options
	@# through TORCH_ARGS, e.g. make setup TORCH_ARGS="--torch-index https://download.pytorch.org/whl/cu126".
	$(BIN)/python scripts/install.py --venv $(VENV) --torch-only $(TORCH_ARGS)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[dev,bench,cuda]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/python -m dg_lsp.devtools.demo

# The README's test command, and CI's (.ci/run is `make test` alone). Caches that outlive a clone live under
# ~/.cache/dg-lsp (XDG_CACHE_HOME): mypy's, the real-editor test bed (editors/vscode/test/e2e/testbed.sh) and the
# vLLM venv; the openai backend's contract against vLLM's own models runs when that venv is there
# (`make vllm-contract` installs it once).
test: test-deps typecheck test-py test-vscode
	@if [ -f "$(VLLM_VENV)/.installed" ]; then $(MAKE) --no-print-directory vllm-contract; \
	else echo "test: vLLM contract not run (make vllm-contract installs its venv once, ~1 GB)"; fi

# The system packages the real-editor tiers need (tmux, inotify-tools, emacs-nox + elpa-eglot): installed as root
# with apt-get; otherwise listed, and the tests that need one fail naming it (DG_REQUIRE_TIERS=1 below).
.PHONY: test-deps
test-deps:
	@bash tests/editors/system_packages.sh

# The engine seam and its implementers, strict ([tool.mypy] in pyproject.toml); fails on a violation.
# mypy's cache is shared by clones (a cold run is ~28 CPU-s, mostly torch's stubs; warm ~1 s): mypy checks each
# cached file against its source's hash, so a cache written by another clone is safe to reuse.
typecheck: setup
	MYPY_CACHE_DIR="$${MYPY_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/dg-lsp/mypy}" $(BIN)/mypy

# pytest exits 5 when it collected nothing: make stops on any non-zero exit, so an empty run fails.
# Parallel workers (one per core, at most 4): most server tests wait on a child process, so 2 workers on 2 cores
# took the Python tier from 547 s to 300 s. --maxschedchunk=1: a worker takes the next test when it is free, in the
# order tests/conftest.py gives (the longest first), not a block of consecutive tests up front.
# DG_REQUIRE_TIERS=1: a real-editor tier whose system package is missing fails naming it (plain pytest skips).
test-py: setup
	DG_REQUIRE_TIERS=1 $(BIN)/python -m pytest -n auto --maxprocesses=4 --maxschedchunk=1

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

# The openai backend against vLLM's own request/response models (tests/service/test_vllm_contract.py). vLLM 0.33.0
# without its dependencies, in a cached venv of its own (outside the checkout, so CI's fresh clones reuse it) with
# the few small modules its protocol imports; torch, transformers and pydantic come from this project's .venv, added
# behind the venv's own packages by a .pth hook reading DG_PROJECT_SITE. First run: a 336 MB download, about 1 GB
# on disk, about a minute; then the tests take about a minute (importing vLLM's protocol modules alone ~35 s).
VLLM_VENV ?= $(HOME)/.cache/dg-lsp/vllm-0.33.0
VLLM_PKGS := vllm==0.33.0 aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 cachetools==8.0.2 cbor2==6.3.0 \
	cloudpickle==3.1.3 fastapi==0.136.3 frozenlist==1.8.0 msgspec==0.23.0 multidict==7.2.1 openai==3.57.0 \
	opentelemetry-api==1.45.2 oss-harmony==0.0.11 prometheus_client==0.26.0 propcache==0.5.4 py-cpuinfo==9.0.0 \
	pybase64==1.5.1 pyzmq==27.3.0 sniffio==1.3.1 uvloop==0.23.0 yarl==1.25.1

$(VLLM_VENV)/.installed:
	$(BIN)/python -m venv $(VLLM_VENV)
	echo 'import os, site; p = os.environ.get("DG_PROJECT_SITE"); p and site.addsitedir(p)' \
		> "$$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/dg-project.pth"
	$(VLLM_VENV)/bin/pip install -q --no-deps $(VLLM_PKGS)
	touch $@

vllm-contract: setup $(VLLM_VENV)/.installed
	DG_PROJECT_SITE="$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
		PYTHONPATH=$(CURDIR) $(VLLM_VENV)/bin/python -m pytest tests/service/test_vllm_contract.py -p no:randomly
