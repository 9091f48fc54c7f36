"""Install dg-lsp for a user: a virtual environment holding the server and the right torch, no dev or bench tools.

    python3 scripts/install.py                   # from this clone, into the default venv (printed)
    python3 scripts/install.py --venv ~/dg-venv  # another venv (made if missing, else reused)
    python3 scripts/install.py --wheel dist/dg_lsp-0.1.0-py3-none-any.whl
    python3 scripts/install.py --dry-run         # print what it would run, change nothing

torch: with no NVIDIA GPU (`nvidia-smi -L` lists none) the CPU build. `pip install --dry-run --report` of torch shows
whether this machine's pip already resolves a CPU wheel (PyPI's macOS and Windows wheels; a local `+cpu` wheel);
otherwise it comes from PyPI's CPU wheel index (https://download.pytorch.org/whl/cpu): PyPI's Linux torch is a
CUDA build that pulls about 3 GB of NVIDIA packages. With a GPU: PyPI's CUDA torch (CUDA 13: NVIDIA driver >= 580)
or the index given with --torch-index, and dg-lsp's `cuda` extra (Triton kernels). Standard library only; any OS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TORCH_VERSION = "2.13.0"  # the torch the tests run; pyproject.toml admits >= 2.6
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MIN_DRIVER = 580  # PyPI's torch 2.13 on Linux is built for CUDA 13.0, which needs an NVIDIA driver >= 580
MIN_PYTHON = (3, 11)
CLONE = Path(__file__).resolve().parents[1]
PIPX = """with pipx instead (one app venv, dg-lsp on PATH; the same torch choice by hand):
  no NVIDIA GPU: pipx install --pip-args="--extra-index-url https://download.pytorch.org/whl/cpu" /path/to/dg-lsp
  NVIDIA GPU:    pipx install "/path/to/dg-lsp[cuda]\""""


def default_venv(platform: str = sys.platform, env: dict | None = None, home: Path | None = None) -> Path:
    """A per-user place: $XDG_DATA_HOME (~/.local/share) on Linux, ~/Library/Application Support on macOS,
    %LOCALAPPDATA% on Windows; then dg-lsp/venv."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    if platform == "win32":
        base = Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
    return base / "dg-lsp" / "venv"


def venv_exe(venv: Path, name: str, platform: str = sys.platform) -> Path:
    return venv / "Scripts" / f"{name}.exe" if platform == "win32" else venv / "bin" / name


def detect_gpu(run=subprocess.run) -> tuple[list[str], int | None]:
    """(the GPUs `nvidia-smi -L` lists, the driver's major version) -- ([], None) without a working nvidia-smi."""
    try:
        listed = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return [], None
    gpus = [line.strip() for line in listed.stdout.splitlines() if line.startswith("GPU ")]
    if listed.returncode != 0 or not gpus:
        return [], None
    try:
        q = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                text=True, timeout=30)
        driver = int(q.stdout.split(".")[0].strip())
    except (OSError, subprocess.SubprocessError, ValueError):
        driver = None
    return gpus, driver


def resolved_torch(report: dict) -> tuple[str, bool]:
    """From `pip install --dry-run --report` of torch: (torch's version and where from, whether it is a CPU build).
    A CPU build: a `+cpu` wheel, or one that is not `+cu...` and pulls no NVIDIA/CUDA/Triton packages."""
    installs = report.get("install", [])
    names = [i["metadata"]["name"].lower().replace("_", "-") for i in installs]
    torch = next((i for i in installs if i["metadata"]["name"].lower() == "torch"), None)
    if torch is None:
        raise RuntimeError("pip's resolution of torch holds no torch")
    version = torch["metadata"]["version"]
    where = f"{version} ({torch.get('download_info', {}).get('url', '?')})"
    gpu_deps = [n for n in names if n.startswith(("nvidia-", "cuda-", "triton"))]
    cpu = version.endswith("+cpu") or ("+cu" not in version and "+rocm" not in version and not gpu_deps)
    return where, cpu


def probe_torch(python: Path | str, version: str, index: str | None = None) -> dict:
    """pip's dry-run resolution of torch==version for `python` (nothing is installed; installed packages ignored)."""
    with tempfile.TemporaryDirectory() as d:
        report = Path(d) / "report.json"
        cmd = [str(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
               str(report), f"torch=={version}", *(["--index-url", index] if index else [])]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pip could not resolve torch=={version} (no network to the package index?):\n"
                               f"$ {' '.join(cmd)}\n{r.stderr.strip()[-2000:]}")
        return json.loads(report.read_text())


def torch_command(pip: list[str], want: str, version: str, report: dict | None, driver: int | None,
                  index: str | None) -> tuple[list[str], str]:
    """(the pip command that installs torch, why). `want`: "cpu" or "cuda"; `report`: the dry-run resolution
    (None in --dry-run without pip to ask: the plain install is assumed resolvable)."""
    plain = [*pip, "install", f"torch=={version}"]
    if index:
        return [*plain, "--index-url", index], f"torch from the index given ({index})"
    where, cpu = resolved_torch(report) if report is not None else ("?", want == "cpu")
    if want == "cpu":
        if cpu:
            return plain, f"CPU torch: this machine's pip resolves a CPU build ({where})"
        return [*plain, "--index-url", CPU_INDEX], f"CPU torch from {CPU_INDEX} (pip alone would take {where})"
    if cpu:
        raise SystemExit(f"install.py: an NVIDIA GPU is present, but pip resolves torch=={version} to a CPU build "
                         f"({where}). Pass --torch-index with a CUDA index (e.g. https://download.pytorch.org/whl/"
                         "cu130 for CUDA 13, driver >= 580; .../cu126 for CUDA 12.6, driver >= 525), or --torch cpu.")
    if driver is not None and driver < MIN_DRIVER:
        raise SystemExit(f"install.py: NVIDIA driver {driver} is older than {MIN_DRIVER}, which PyPI's torch "
                         f"{version} (CUDA 13) needs. Update the driver, or pass --torch-index https://download."
                         "pytorch.org/whl/cu126 (CUDA 12.6 wheels, driver >= 525), or --torch cpu.")
    return plain, f"CUDA torch from pip's index ({where})"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="install.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=PIPX)
    p.add_argument("--venv", type=Path, default=None,
                   help=f"the virtual environment to make or reuse (default: {default_venv()})")
    p.add_argument("--wheel", type=Path, default=None, help="install this built wheel instead of the clone")
    p.add_argument("--torch", choices=["auto", "cpu", "cuda"], default="auto",
                   help="which torch build (default auto: cuda when nvidia-smi lists a GPU)")
    p.add_argument("--torch-version", default=TORCH_VERSION, help=f"default {TORCH_VERSION}, the tested one")
    p.add_argument("--torch-index", default=None, metavar="URL", help="take torch from this package index")
    p.add_argument("--no-compile", action="store_true", help="skip byte-compiling (a faster install, a slower "
                   "first start)")
    p.add_argument("--torch-only", action="store_true", help="install torch and stop (the Makefile's dev setup "
                   "then installs dg-lsp editable with its dev extras)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the commands; change nothing")
    return p.parse_args(argv)


def run(cmd: list[str], dry: bool) -> None:
    print("$ " + " ".join(f'"{c}"' if " " in c else c for c in cmd), flush=True)
    if not dry:
        subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if sys.version_info < MIN_PYTHON:
        print(f"install.py: dg-lsp needs Python >= {'.'.join(map(str, MIN_PYTHON))}; this is {sys.version.split()[0]}."
              " Run it with a newer python3.", file=sys.stderr)
        return 2
    venv = (args.venv or default_venv()).expanduser().absolute()
    source = args.wheel.expanduser().absolute() if args.wheel else CLONE
    if not (source.is_file() if args.wheel else (source / "pyproject.toml").is_file()):
        print(f"install.py: {source} is not a wheel or a dg-lsp clone", file=sys.stderr)
        return 2
    gpus, driver = detect_gpu()
    want = args.torch if args.torch != "auto" else ("cuda" if gpus else "cpu")
    print(f"NVIDIA GPU: {'; '.join(gpus) + f' (driver {driver})' if gpus else 'none found (nvidia-smi -L)'}")
    print(f"torch build: {want}; venv: {venv}; dg-lsp from: {source}")
    python = venv_exe(venv, "python")
    existed = python.exists()
    if not existed:
        run([sys.executable, "-m", "venv", str(venv)], args.dry_run)
    pip = [str(python), "-m", "pip"]
    asker = python if python.exists() else sys.executable  # in --dry-run the venv may not exist yet
    can_ask = args.torch_index is None and subprocess.run([str(asker), "-m", "pip", "--version"],
                                                          capture_output=True).returncode == 0
    try:
        report = probe_torch(asker, args.torch_version) if can_ask else None
        torch_cmd, why = torch_command(pip, want, args.torch_version, report, driver, args.torch_index)
    except RuntimeError as e:
        print(f"install.py: {e}", file=sys.stderr)
        return 1
    print(why)
    quiet = ["--no-compile"] if args.no_compile else []
    run([*torch_cmd, *quiet], args.dry_run)
    if args.torch_only:
        return 0
    if existed:  # an update from the clone keeps its version number: pip would call it installed already
        run([*pip, "uninstall", "--yes", "dg-lsp"], args.dry_run)
    extra = "[cuda]" if want == "cuda" else ""
    # No dev/bench extras. The torch above already satisfies dg-lsp's torch>=2.6: pip keeps it.
    run([*pip, "install", *quiet, f"{source}{extra}"], args.dry_run)
    exe = venv_exe(venv, "dg-lsp")
    if not args.dry_run:
        run([str(exe), "--version"], False)
    print(f"\ndg-lsp {'will be' if args.dry_run else 'is'} {exe}\nPoint your editor at it (or put its folder on "
          f"PATH); check the model with:\n  {exe} --check\n\n{PIPX}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """main, with a step that fails said in one line (pip's own output above it says why)."""
    try:
        return main(argv)
    except subprocess.CalledProcessError as e:
        print(f"install.py: this step failed (exit {e.returncode}): {' '.join(map(str, e.cmd))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(cli())
