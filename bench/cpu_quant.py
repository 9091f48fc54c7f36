"""Quantized GGUF files on a CPU, side by side with llama.cpp's DiffusionGemma (the #24423 tree): the same files
(F32, Q8_0, Q4_K_M of a DiffusionGemma-shaped random model: hidden 1024, 8 layers, 16 experts top-4, vocab 32,768,
~316M parameters), llama.cpp's `llama-diffusion-cli` and our engine alternated row by row at 1 and 2 threads,
canvases 32 and 256: median ms per denoising step over warm steps (llama.cpp: the gaps between its per-step log
lines, so its prompt prefill is not counted; ours: the gaps between the engine's per-step drafts), the load average
beside every row, each side's resident memory, our logits' error against the F32 file (bench.cpu_quant_error: and
what x in 8 bits adds to one matmul), and ours before the native kernels (`before_ms`: DG_NATIVE=0, the torch tile
path, in a second process on the same file).

    python -m bench.cpu_quant [--quick] [--formats F32,Q8_0,Q4_K_M] [--threads 1,2] [--canvases 32,256]
                              [--llamacpp DIR] [--steps 12]

llama.cpp is not part of this checkout: build it once (../shared/GGUF.md §7) into ~/.cache/dg-lsp/llama.cpp-build;
`--llamacpp DIR` or DG_LLAMACPP_BIN point at another folder holding `llama-diffusion-cli`. Without it the bench says
so and times ours only. Files are cached under ~/.cache/dg-lsp/cpu_quant/. `--quick`: a tiny file in a temporary
folder, ours only (a code-path check for tests/bench). Last line JSON: vs_llamacpp {format: {canvas: {threads:
{ours_ms, llamacpp_ms, ratio}}}}, rows (each with load average and memory), logit_rel_err, before_ms, memory,
llamacpp; also written to bench/results/cpu_quant.json (not with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import checkout_env, emit, machine, median  # noqa: E402
from bench.cpu_quant_error import matmul_errors  # noqa: E402

CACHE = Path.home() / ".cache" / "dg-lsp"
LLAMA_BIN = CACHE / "llama.cpp-build" / "bin"
FULL = dict(hidden_size=1024, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
            num_key_value_heads=2, head_dim=128, global_head_dim=256, num_global_key_value_heads=1,
            sliding_window=128, layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 2,
            num_experts=16, top_k_experts=4, moe_intermediate_size=512)
QUICK = dict(FULL, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, layer_types=["sliding_attention", "full_attention"], num_experts=4,
             top_k_experts=2, moe_intermediate_size=256)
PROMPT_TOKENS = 32
# llama.cpp's byte-level vocabulary written into the files: ids 0..15 control tokens (pad 0, eos 1, bos 2, unk 3,
# mask 4), then the 256 byte tokens; the rest are unused tokens up to the model's vocabulary.
# 5..7 the FIM tokens, so our engine finds its prompt format in the file's own vocabulary (the bench feeds ids)
SPECIALS = (["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]
            + [f"<special_{i}>" for i in range(8, 16)])


def _byte_tokens() -> list[str]:
    """GPT-2's byte -> printable character map (byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def _writer_with_vocab(vocab: int):
    """gguf.GGUFWriter that also writes what llama.cpp's loader needs: a gpt2 vocabulary of `vocab` tokens and a mask
    id (our writer leaves those to the tokenizer.json it is given)."""
    import gguf

    tokens = SPECIALS + _byte_tokens() + ["ab"]  # "ab": the one merge's result, which BPE needs as a token
    tokens += [f"<unused_{i}>" for i in range(vocab - len(tokens))]
    types = [3] * len(SPECIALS) + [1] * (vocab - len(SPECIALS))

    class Writer(gguf.GGUFWriter):
        def write_header_to_file(self, *a, **k):
            self.add_tokenizer_model("gpt2")
            self.add_tokenizer_pre("gpt-2")
            self.add_token_list(tokens)
            self.add_token_types(types)
            self.add_token_merges([f"{tokens[16 + ord('a')]} {tokens[16 + ord('b')]}"])
            self.add_uint32("tokenizer.ggml.mask_token_id", 4)
            self.add_uint32("tokenizer.ggml.unknown_token_id", 3)
            self.add_add_bos_token(True)  # general.file_type: engine.formats.gguf_write writes it
            return super().write_header_to_file(*a, **k)

    return gguf, Writer


def _set_canvas(src: Path, dst: Path, canvas: int) -> None:
    """A copy of a GGUF with diffusion.canvas_length set to `canvas` (llama.cpp's canvas is the file's)."""
    shutil.copyfile(src, dst)
    key = b"diffusion.canvas_length"
    with open(dst, "r+b") as f:
        head = f.read(1 << 20)
        at = head.index(key) + len(key)
        assert int.from_bytes(head[at:at + 4], "little") == 4  # GGUF value type uint32
        f.seek(at + 4)
        f.write(canvas.to_bytes(4, "little"))


def build_files(root: Path, shape: dict, vocab: int, formats: list[str], canvases: list[int]) -> dict:
    """{format: {canvas: path}}: the random checkpoint written once per format, a copy per canvas length."""
    from engine.formats import gguf_write as W
    from engine.testing.tiny import build_tiny_checkpoint

    rules = {"F32": "F32", "Q8_0": "Q8_0", "Q4_K_M": W.q4_k_m_type}
    src = root / "hf"
    if not (src / "model.safetensors").is_file():
        build_tiny_checkpoint(src, shape, canvas_length=canvases[0], seed=0, with_tokenizer=False, vocab_size=vocab)
    out: dict[str, dict[int, Path]] = {}
    for fmt in formats:
        rule = rules[fmt]
        base = root / f"{fmt}-c{canvases[0]}.gguf"
        if not base.is_file():
            gguf, writer = _writer_with_vocab(vocab)
            plain, gguf.GGUFWriter = gguf.GGUFWriter, writer
            try:
                W.write_gguf(src, base.with_suffix(".tmp"), rule, canvas_length=canvases[0], tokenizer=False)
            finally:
                gguf.GGUFWriter = plain
            base.with_suffix(".tmp").rename(base)
        out[fmt] = {canvases[0]: base}
        for c in canvases[1:]:
            path = root / f"{fmt}-c{c}.gguf"
            if not path.is_file():
                _set_canvas(base, path, c)
            out[fmt][c] = path
    return out


# -- our side: one child process per file, told which rows to run ---------------------------------------------------
_OURS = r"""
import json, sys, time, torch
from safetensors.torch import save_file
from engine.engine import Engine
from engine.model.transformer import KVCache
from engine.quant.native import build
def status():
    with open('/proc/self/status') as f:
        keys = ('VmRSS', 'VmHWM', 'RssAnon', 'RssFile')
        out = {l.split(':')[0]: int(l.split()[1]) * 1024 for l in f if l.split(':')[0] in keys}
    mapped, inside = 0, False  # resident pages of the GGUF file's own mappings (its weights, read in place)
    with open('/proc/self/smaps') as f:
        for l in f:
            if l[0] in '0123456789abcdef' and '-' in l.split()[0]:
                inside = l.rstrip().endswith(sys.argv[1])
            elif inside and l.startswith('Rss:'):
                mapped += int(l.split()[1]) * 1024
    out['FileMapped'] = mapped
    return out
base = status()
eng = Engine.from_pretrained(sys.argv[1], device='cpu', dtype='float32')
g = torch.Generator().manual_seed(0)
ids = torch.randint(16, eng.vocab_size, (PROMPT,), generator=g).tolist()
print(json.dumps({'ready': True, 'mem': status(), 'base': base, 'native': build.reason() or 'on'}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get('logits'):
        m = eng.model
        with torch.inference_mode():
            canvas = torch.randint(16, eng.vocab_size, (1, 32), generator=torch.Generator().manual_seed(1))
            out = m.decode(canvas, m.encode(torch.tensor([ids]), KVCache()), None).float()
        save_file({'logits': out.contiguous()}, req['logits'])
        print(json.dumps({'done': True}), flush=True)
        continue
    torch.set_num_threads(req['threads'])
    stamps = []
    for d in eng.stream(ids, canvas_length=req['canvas'], steps=req['steps'], entropy_bound=1e-6, seed=0,
                        draft_text=False):
        if not d.done:  # the last draft carries the result, right after the last step's
            stamps.append(time.perf_counter())
    gaps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:], strict=False)]
    print(json.dumps({'gaps': gaps, 'mem': status()}), flush=True)
""".replace("PROMPT", str(PROMPT_TOKENS))


class Ours:
    def __init__(self, path: Path, native: bool = True) -> None:
        env = checkout_env(OMP_NUM_THREADS="2", **({} if native else {"DG_NATIVE": "0"}))
        self.proc = subprocess.Popen([sys.executable, "-c", _OURS, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"our engine's process exited ({self.proc.wait()})")
        return json.loads(line)

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# -- llama.cpp's side -------------------------------------------------------------------------------------------------
# "M.SS.mmm.uuu I \rdiffusion step: k/n [...]" (the \r reads as a newline in text mode)
_STEP = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+) I \s*diffusion step: (\d+)/(\d+)")


def find_llamacpp(arg: str | None) -> Path | None:
    folder = Path(arg or os.environ.get("DG_LLAMACPP_BIN") or LLAMA_BIN).expanduser()
    cli = folder / "llama-diffusion-cli"
    return cli if cli.is_file() and os.access(cli, os.X_OK) else None


def run_llamacpp(cli: Path, path: Path, threads: int, steps: int, timeout: float = 900) -> dict:
    """One fill by llama-diffusion-cli: per-step gaps from its timestamped step lines, its peak resident memory."""
    prompt = "def add(a, b):\n    return a + b\n"[: PROMPT_TOKENS - 1]  # byte tokens + BOS = 32
    cmd = [str(cli), "-m", str(path), "-p", prompt, "-n", "1", "-t", str(threads), "-tb", str(threads), "-no-cnv",
           "--log-timestamps", "--log-prefix", "--seed", "0", "--diffusion-eb-max-steps", str(steps),
           "--diffusion-eb-entropy-bound", "0.000001"]
    with tempfile.TemporaryFile("w+", errors="replace") as log:  # random byte tokens: not UTF-8
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, LD_LIBRARY_PATH=str(cli.parent)))
        hwm, t0 = 0, time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < timeout:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    hwm = max(hwm, next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM")))
            except (OSError, StopIteration):
                pass
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.seek(0)
        text = log.read()
    stamps = [(int(m[0]) * 60 + int(m[1])) * 1000 + int(m[2]) + int(m[3]) / 1000 for m in _STEP.findall(text)]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    out = {"gaps": gaps, "rss_peak_mb": round(hwm / 2**20, 1), "rc": proc.returncode}
    if not gaps:
        out["error"] = text[-600:]
    return out


def warm_median(gaps: list[float], skip: int = 2) -> float | None:
    warm = gaps[skip:] if len(gaps) > skip + 1 else gaps
    return round(median(warm), 1) if warm else None


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def logit_errors(files: dict, canvas: int, root: Path) -> dict:
    """Our logits on each file against the F32 file's (max |a - b| / max |b|, one prompt and a random 32-token
    canvas): `vs_f32` on the native path (what serves), `exact_vs_f32` on the torch path (DG_NATIVE=0: the format's
    reference dequantization through dense fp32 GEMMs, i.e. the format's own error), `vs_exact` between the two
    (what the native kernels add: fp32 summation order)."""
    from safetensors.torch import load_file

    if "F32" not in files:
        return {}
    logits = {}
    for fmt, by_canvas in files.items():
        for native in (True, False) if fmt != "F32" else (True,):
            ours = Ours(by_canvas[canvas], native=native)
            out = root / f"logits-{fmt}-{native}.safetensors"
            ours.ask(logits=str(out))
            ours.close()
            logits[fmt, native] = load_file(str(out))["logits"]
    ref = logits["F32", True]

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return round(float((a - b).abs().max() / b.abs().max()), 7)

    return {fmt: {"vs_f32": rel(logits[fmt, True], ref), "exact_vs_f32": rel(logits[fmt, False], ref),
                  "vs_exact": rel(logits[fmt, True], logits[fmt, False])}
            for fmt in files if fmt != "F32"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tiny file, ours only, few steps (tests/bench)")
    ap.add_argument("--formats", default="F32,Q8_0,Q4_K_M")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--canvases", default="32,256")
    ap.add_argument("--steps", type=int, default=12, help="denoising steps per fill (the first 2 are not counted)")
    ap.add_argument("--llamacpp", default=None, help="folder holding llama-diffusion-cli (default: "
                    f"$DG_LLAMACPP_BIN or {LLAMA_BIN})")
    ap.add_argument("--no-before", action="store_true", help="skip the torch-path (DG_NATIVE=0, before) figure")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_quant.json"), help="the JSON written")
    args = ap.parse_args()
    formats = args.formats.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    canvases = [int(c) for c in args.canvases.split(",")]
    steps = args.steps
    tmp = tempfile.TemporaryDirectory()
    if args.quick:
        shape, vocab, root, steps = QUICK, 4096, Path(tmp.name), 5
        formats, threads, canvases = [f for f in formats if f in ("F32", "Q4_K_M")] or formats, [1], [16]
        cli = None
    else:
        shape, vocab, root = FULL, 32768, CACHE / "cpu_quant"
        cli = find_llamacpp(args.llamacpp)
    root.mkdir(parents=True, exist_ok=True)
    if cli is None and not args.quick:
        where = args.llamacpp or os.environ.get("DG_LLAMACPP_BIN") or LLAMA_BIN
        print(f"llama.cpp's llama-diffusion-cli not found (looked in {where}): timing ours only. Build it as "
              "../shared/GGUF.md §7 says, or pass --llamacpp DIR.")
    t0 = time.perf_counter()
    files = build_files(root, shape, vocab, formats, canvases)
    print(f"files ready in {time.perf_counter() - t0:.0f} s under {root}: "
          + ", ".join(f"{f} {p[canvases[0]].stat().st_size / 2**20:.0f} MB" for f, p in files.items()), flush=True)
    rows, table, memory, before = [], {}, {}, {}
    for fmt in formats:
        for canvas in canvases:
            path = files[fmt][canvas]
            ours, old = Ours(path), None
            file_mb = path.stat().st_size / 2**20
            for t in threads:
                row = {"format": fmt, "canvas": canvas, "threads": t}
                # alternate which side goes first, so a load change hits both in turn
                order = ["llamacpp", "ours"] if (len(rows) % 2 == 0) else ["ours", "llamacpp"]
                for side in order:
                    if side == "llamacpp" and cli is not None:
                        row["load_llamacpp"] = load_avg()
                        r = run_llamacpp(cli, path, t, steps)
                        row["llamacpp_ms"] = warm_median(r["gaps"])
                        row["llamacpp_steps"] = len(r["gaps"]) + 1 if r["gaps"] else 0
                        row["llamacpp_rss_mb"] = r["rss_peak_mb"]
                        if "error" in r:
                            row["llamacpp_error"] = r["error"]
                    elif side == "ours":
                        row["load_ours"] = load_avg()
                        r = ours.ask(canvas=canvas, threads=t, steps=steps)
                        row["ours_ms"] = warm_median(r["gaps"])
                        row["ours_steps"] = len(r["gaps"]) + 1
                        row["ours_rss_mb"] = round(r["mem"]["VmHWM"] / 2**20, 1)
                        row["ours_anon_mb"] = round(r["mem"]["RssAnon"] / 2**20, 1)
                        # what serving the file added: resident memory now less the process's before the load
                        row["ours_served_mb"] = round((r["mem"]["VmRSS"] - ours.ready["base"]["VmRSS"]) / 2**20, 1)
                        # of which the file's own pages (weights read in place) and the process's new anonymous
                        # memory (tensors, KV cache, buffers); the rest is shared libraries paged in by the first fill
                        row["ours_file_pages_mb"] = round(r["mem"]["FileMapped"] / 2**20, 1)
                        row["ours_anon_growth_mb"] = round(
                            (r["mem"]["RssAnon"] - ours.ready["base"]["RssAnon"]) / 2**20, 1)
                        row["native"] = ours.ready["native"]
                if fmt != "F32" and not args.no_before and not args.quick:
                    if old is None:
                        old = Ours(path, native=False)
                    row["load_before"] = load_avg()
                    b = old.ask(canvas=canvas, threads=t, steps=min(steps, 6))
                    row["before_ms"] = warm_median(b["gaps"])
                    before.setdefault(fmt, {}).setdefault(str(canvas), {})[str(t)] = row["before_ms"]
                rows.append(row)
                ratio = (round(row["ours_ms"] / row["llamacpp_ms"], 3)
                         if row.get("llamacpp_ms") and row.get("ours_ms") else None)
                table.setdefault(fmt, {}).setdefault(str(canvas), {})[str(t)] = {
                    "ours_ms": row.get("ours_ms"), "llamacpp_ms": row.get("llamacpp_ms"), "ratio": ratio}
                print(json.dumps(row), flush=True)
            last = rows[-1]
            memory.setdefault(fmt, {})[str(canvas)] = {
                "file_mb": round(file_mb, 1), "ours_rss_peak_mb": rows[-1]["ours_rss_mb"],
                "ours_anon_mb": rows[-1]["ours_anon_mb"], "ours_served_mb": rows[-1]["ours_served_mb"],
                "ours_served_over_file": round(rows[-1]["ours_served_mb"] / file_mb, 3),
                "ours_file_pages_mb": last["ours_file_pages_mb"], "ours_anon_growth_mb": last["ours_anon_growth_mb"],
                "ours_model_over_file": round((last["ours_file_pages_mb"] + last["ours_anon_growth_mb"]) / file_mb, 3),
                "llamacpp_rss_peak_mb": rows[-1].get("llamacpp_rss_mb")}
            ours.close()
            if old is not None:
                old.close()
    errs = logit_errors(files, canvases[0], Path(tmp.name))
    print(f"logits vs F32 (ours): {errs}")
    matmul = matmul_errors(files)
    print(f"one matmul vs F32 (the format's own error, x in 8 bits): {matmul}")
    result = {"vs_llamacpp": table, "rows": rows, "before_ms": before, "logit_rel_err": errs, "matmul_error": matmul,
              "memory": memory, "llamacpp": str(cli) if cli else None, "steps": steps, "prompt_tokens": PROMPT_TOKENS,
              "shape": {k: v for k, v in shape.items() if k != "layer_types"}, "vocab": vocab, "quick": args.quick,
              "loadavg_start_end": [rows[0].get("load_ours"), load_avg()] if rows else None, "machine": machine()}
    if not args.quick:
        out = Path(args.out)
        out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    tmp.cleanup()
    emit(result)


if __name__ == "__main__":
    main()
