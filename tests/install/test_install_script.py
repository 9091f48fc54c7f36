"""scripts/install.py's decisions, without installing anything: where the venv goes, whether a GPU is there, which
torch build pip would take and where the CPU one comes from, and what a --dry-run plans (and that it changes
nothing). The install itself is tests/install/test_user_install.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .install_script import SCRIPT, install_script

inst = install_script()
PIP = ["/venv/bin/python", "-m", "pip"]


def report(torch_version: str, *deps: str) -> dict:
    """A `pip install --dry-run --report` of torch, as pip writes it (the fields install.py reads)."""
    names = ["torch", *deps]
    return {"install": [{"metadata": {"name": n, "version": torch_version if n == "torch" else "1.0"},
                         "download_info": {"url": f"https://files.example/{n}.whl"}} for n in names]}


LOCAL_CPU = report("2.13.0+cpu", "sympy", "filelock")  # this machine: a local +cpu wheel
PYPI_LINUX = report("2.13.0", "nvidia-cublas", "cuda-toolkit", "triton", "sympy")  # PyPI's Linux wheel: CUDA 13
PYPI_MAC = report("2.13.0", "sympy", "filelock")  # PyPI's macOS (and Windows) wheels: CPU builds
CUDA_INDEX = report("2.13.0+cu126", "sympy")


def test_the_default_venv_is_per_user_on_each_system():
    home = Path("/home/ada")
    assert inst.default_venv("linux", {}, home) == home / ".local/share/dg-lsp/venv"
    assert inst.default_venv("linux", {"XDG_DATA_HOME": "/data"}, home) == Path("/data/dg-lsp/venv")
    assert inst.default_venv("darwin", {}, home) == home / "Library/Application Support/dg-lsp/venv"
    assert inst.default_venv("win32", {"LOCALAPPDATA": "C:/Users/ada/AppData/Local"}, home) == Path(
        "C:/Users/ada/AppData/Local/dg-lsp/venv")
    assert inst.venv_exe(Path("/v"), "dg-lsp", "win32") == Path("/v/Scripts/dg-lsp.exe")
    assert inst.venv_exe(Path("/v"), "dg-lsp", "linux") == Path("/v/bin/dg-lsp")


def fake_smi(listing: str, code: int = 0, driver: str = "580.65.06\n"):
    def run(cmd, **_):
        out = listing if cmd[1] == "-L" else driver
        return subprocess.CompletedProcess(cmd, code, out, "")
    return run


def test_a_gpu_is_what_nvidia_smi_lists():
    def missing(cmd, **_):
        raise FileNotFoundError(cmd[0])

    assert inst.detect_gpu(missing) == ([], None)
    assert inst.detect_gpu(fake_smi("", 9)) == ([], None)  # a driver without a device: no GPU
    assert inst.detect_gpu(fake_smi("No devices were found\n")) == ([], None)
    gpus, driver = inst.detect_gpu(fake_smi("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)\n", driver="550.54\n"))
    assert gpus == ["GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)"] and driver == 550


@pytest.mark.parametrize("resolution, cpu", [(LOCAL_CPU, True), (PYPI_MAC, True), (PYPI_LINUX, False),
                                             (CUDA_INDEX, False)])
def test_pip_s_resolution_tells_a_cpu_build(resolution, cpu):
    where, is_cpu = inst.resolved_torch(resolution)
    assert is_cpu is cpu and where.startswith(resolution["install"][0]["metadata"]["version"])


def test_without_a_gpu_the_cpu_torch_comes_from_pip_when_it_resolves_one_else_from_the_cpu_index():
    plain = [*PIP, "install", "torch==2.13.0"]
    assert inst.torch_command(PIP, "cpu", "2.13.0", LOCAL_CPU, None, None)[0] == plain
    assert inst.torch_command(PIP, "cpu", "2.13.0", PYPI_MAC, None, None)[0] == plain
    cmd, why = inst.torch_command(PIP, "cpu", "2.13.0", PYPI_LINUX, None, None)
    assert cmd == [*plain, "--index-url", "https://download.pytorch.org/whl/cpu"]
    assert "download.pytorch.org/whl/cpu" in why and "2.13.0" in why


def test_with_a_gpu_the_cuda_torch_needs_a_recent_driver_or_an_index():
    plain = [*PIP, "install", "torch==2.13.0"]
    assert inst.torch_command(PIP, "cuda", "2.13.0", PYPI_LINUX, 580, None)[0] == plain
    with pytest.raises(SystemExit, match="driver 550 is older than 580.*--torch-index"):
        inst.torch_command(PIP, "cuda", "2.13.0", PYPI_LINUX, 550, None)
    with pytest.raises(SystemExit, match="resolves torch==2.13.0 to a CPU build.*--torch-index"):
        inst.torch_command(PIP, "cuda", "2.13.0", PYPI_MAC, 580, None)  # Windows: PyPI has only the CPU build
    index = "https://download.pytorch.org/whl/cu126"
    assert inst.torch_command(PIP, "cuda", "2.13.0", None, 550, index)[0] == [*plain, "--index-url", index]


def dry_run(tmp_path: Path, *args: str, gpu: bool) -> subprocess.CompletedProcess:
    """install.py --dry-run with a stand-in nvidia-smi first on PATH (listing a GPU, or failing as with none)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    listing = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"' if gpu else "exit 9"
    smi.write_text(f'#!/bin/sh\ncase "$1" in -L) {listing};; *) echo 590.10;; esac\n')
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--venv", str(tmp_path / "venv"), *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in nvidia-smi is a shell script")
def test_a_dry_run_on_a_gpu_machine_plans_the_cuda_extra_and_changes_nothing(tmp_path):
    index = "https://download.pytorch.org/whl/cu130"
    r = dry_run(tmp_path, "--torch-index", index, gpu=True)  # an index given: pip is not asked
    assert r.returncode == 0, r.stderr
    assert "GPU 0: NVIDIA H100" in r.stdout and "driver 590" in r.stdout and "torch build: cuda" in r.stdout
    assert f"torch==2.13.0 --index-url {index}" in r.stdout
    assert f"install {Path(SCRIPT).parents[1]}[cuda]" in r.stdout
    assert "dg-lsp will be " in r.stdout and not (tmp_path / "venv").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in nvidia-smi is a shell script")
def test_a_dry_run_without_a_gpu_plans_the_cpu_torch_and_no_extras(tmp_path):
    r = dry_run(tmp_path, "--torch-index", "https://download.pytorch.org/whl/cpu", gpu=False)
    assert r.returncode == 0, r.stderr
    assert "none found" in r.stdout and "torch build: cpu" in r.stdout
    plans = [line for line in r.stdout.splitlines() if line.startswith("$ ")]
    assert plans[0].endswith(f"-m venv {tmp_path / 'venv'}")
    assert plans[-1].endswith(f"install {Path(SCRIPT).parents[1]}")  # no [cuda], no [dev], no [bench]
    assert not (tmp_path / "venv").exists()


def test_a_wrong_source_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--wheel", str(tmp_path / "nope.whl")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == f"install.py: {tmp_path / 'nope.whl'} is not a wheel or a " \
                                                      "dg-lsp clone"


def test_a_step_that_fails_is_one_line_after_its_own_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a venv cannot be made inside a file
    r = subprocess.run([sys.executable, str(SCRIPT), "--venv", str(blocker / "venv"), "--torch-index",
                        "https://download.pytorch.org/whl/cpu"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr.splitlines()[-1]
    assert r.stderr.splitlines()[-1].startswith("install.py: this step failed (exit 1): ") and "-m venv" in \
        r.stderr.splitlines()[-1]


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in nvidia-smi is a shell script")
def test_the_makefile_s_torch_only_step_installs_torch_and_nothing_else(tmp_path):
    r = dry_run(tmp_path, "--torch-only", "--torch-index", "https://download.pytorch.org/whl/cpu", gpu=False)
    assert r.returncode == 0, r.stderr
    plans = [line for line in r.stdout.splitlines() if line.startswith("$ ")]
    assert len(plans) == 2 and "torch==2.13.0" in plans[-1] and "dg-lsp will be" not in r.stdout
