"""engine.kernels: the Triton vocabulary pass against its eager oracle; the oracle's sampler against softmax.

On CPU the real Triton kernel runs in Triton's interpreter. `triton.jit` picks interpreter or compiler when it
decorates, and `triton.language` decorates its own helpers (`tl.zeros`, `tl.max`, ...) when first imported, so
TRITON_INTERPRET=1 must be set before anything imports triton. A pytest session cannot promise that (any test
module may import the engine first), so the kernel runs in one child process started with the switch on; it
gets every input from here and hands back every output, and the assertions run here against the reference.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.kernels.reference import (
    gumbel_from_bits,
    noise_bits,
    processed_logits,
    row_seeds,
    vocab_pass_reference,
)

ROOT = Path(__file__).resolve().parents[2]
ENTROPY_TOL = dict(rtol=1e-4, atol=1e-5)
# Upper 0.1% points of chi-square, for a test that is deterministic (fixed seeds) but meant to mean something.
CHI2_999 = {9: 27.88, 15: 37.70}

CHILD = """
import sys, torch
from triton.runtime.interpreter import InterpretedFunction
from engine.kernels import available, vocab_pass
from engine.kernels.vocab_pass import _vocab_pass_kernel
assert available() and isinstance(_vocab_pass_kernel, InterpretedFunction), "not the interpreted kernel"
jobs = torch.load(sys.argv[1])
out = {}
for name, job in jobs.items():
    if isinstance(job.get("probs_out"), str):  # "in_place": probabilities written over their own logits
        job = dict(job, logits=job["logits"].clone())
        job["probs_out"] = job["logits"]
    out[name] = (*vocab_pass(**job), job.get("probs_out"))
torch.save(out, sys.argv[2])
"""


ROW_KINDS = ("randn", "ties", "huge", "tiny", "masked", "extreme")


def make_logits(rows: int, vocab: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """(rows, vocab) logits in `dtype`, cycling through the row kinds that stress the pass."""
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(rows, vocab)
    for r in range(rows):
        kind = ROW_KINDS[r % len(ROW_KINDS)]
        if kind == "randn":
            out[r] = torch.randn(vocab, generator=g) * 3
        elif kind == "ties":  # a handful of levels: the max appears many times, argmax must pick the first
            out[r] = torch.randint(-3, 4, (vocab,), generator=g).float()
        elif kind == "huge":  # near one-hot; with the soft-cap most of it saturates to +-30 (ties again)
            out[r] = torch.randn(vocab, generator=g) * 1e4
        elif kind == "tiny":
            out[r] = torch.randn(vocab, generator=g) * 1e-30
        elif kind == "masked":  # masked vocabulary entries
            out[r] = torch.randn(vocab, generator=g)
            out[r, torch.randperm(vocab, generator=g)[: vocab // 2]] = float("-inf")
        else:  # beyond fp16's range, finite in fp32/bf16
            out[r] = torch.randn(vocab, generator=g).sign() * (1e30 if dtype != torch.float16 else 6e4)
    return out.to(dtype)


CASES = {  # name: rows, vocab, block, dtype, softcap, temperature
    "fp32-plain": (6, 1000, 256, torch.float32, None, 1.0),
    "fp32-capped-cold": (6, 1000, 256, torch.float32, 30.0, 0.4),
    "fp32-tail3": (3, 4099, None, torch.float32, 30.0, 0.7),  # default block 4096: a chunk, then 3 columns
    "bf16-exact-blocks": (6, 2048, 512, torch.bfloat16, 30.0, 0.55),
    "bf16-plain": (6, 1500, 1024, torch.bfloat16, None, 0.8),
    "fp16-capped": (6, 777, 128, torch.float16, 30.0, 1.0),
}


def _jobs() -> dict[str, dict]:
    """Every kernel call the tests check: name -> vocab_pass keyword arguments."""
    jobs = {}
    for name, (rows, vocab, block, dtype, softcap, temperature) in CASES.items():
        logits = make_logits(rows, vocab, dtype, seed=vocab)
        job = dict(logits=logits, inv_temperature=1 / temperature, softcap=softcap, seed=1234, block=block)
        jobs[name] = job
    jobs["per-row"] = dict(
        logits=make_logits(5, 1200, torch.float32, seed=7),
        inv_temperature=1 / torch.tensor([0.4, 0.55, 0.7, 0.85, 1.0]),
        softcap=30.0,
        seed=torch.tensor([0, 1, 2**31, 2**32 + 5, 2**62 + 3]),
        block=256,
    )
    # (B*C, V) decoder logits with every other row taken: rows contiguous, row stride 2 V.
    jobs["strided-rows"] = dict(
        logits=make_logits(8, 640, torch.float32, seed=3)[::2],
        inv_temperature=1.25,
        softcap=None,
        seed=9,
        block=128,
    )
    uniform = torch.zeros(16, 1000)  # every draw is pure noise
    for name, seed, block in [("seed5", 5, 256), ("seed5-block512", 5, 512), ("seed6", 6, 256)]:
        jobs[name] = dict(logits=uniform, inv_temperature=1.0, softcap=None, seed=seed, block=block)
    jobs["seed5-tensor"] = dict(jobs["seed5"], seed=row_seeds(5, 16, "cpu"))
    for name in ("fp32-capped-cold", "bf16-exact-blocks", "fp16-capped"):
        jobs[f"{name}-probs"] = dict(jobs[name], probs_out="in_place")
    jobs["fp32-probs-to-bf16"] = dict(jobs["fp32-tail3"], probs_out=torch.empty(3, 4099, dtype=torch.bfloat16))
    # the sampler seam's case, run through every backend (engine.denoising.sampler.vocab_pass_for)
    jobs["seam"] = dict(logits=make_logits(12, 300, torch.float32, seed=12), inv_temperature=1 / 0.7, softcap=30.0,
                        seed=torch.arange(12, dtype=torch.int64) * 7919, block=128, probs_out="in_place")
    return jobs


JOBS = _jobs()


@pytest.fixture(scope="module")
def kernel_out(tmp_path_factory) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """name -> vocab_pass(**JOBS[name]), computed by the interpreted Triton kernel in a fresh process."""
    pytest.importorskip("triton")
    tmp = tmp_path_factory.mktemp("vocab_pass")
    torch.save(JOBS, tmp / "jobs.pt")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp / "jobs.pt"), str(tmp / "out.pt")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return torch.load(tmp / "out.pt")


def _check(got, want) -> None:
    torch.testing.assert_close(got[0], want[0], **ENTROPY_TOL)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)  # argmax: exact, lowest index on ties
    torch.testing.assert_close(got[2], want[2], rtol=0, atol=0)  # sample: the same noise, so the same pick


def _reference(job: dict):
    return vocab_pass_reference(job["logits"], job["inv_temperature"], job["softcap"], job["seed"])


@pytest.mark.parametrize("name", [*CASES, "per-row", "strided-rows"])
def test_kernel_matches_reference(kernel_out, name):
    assert kernel_out[name][1].dtype == kernel_out[name][2].dtype == torch.int64
    _check(kernel_out[name], _reference(JOBS[name]))


@pytest.mark.parametrize("name", ["fp32-capped-cold-probs", "bf16-exact-blocks-probs", "fp16-capped-probs",
                                  "fp32-probs-to-bf16"])
def test_kernel_writes_the_softmax(kernel_out, name):
    *got, probs = kernel_out[name]
    want = _reference(JOBS[name])
    _check(got, want)  # the second sweep leaves the first one's results alone
    assert probs.dtype == (JOBS[name]["probs_out"].dtype if isinstance(JOBS[name]["probs_out"], torch.Tensor)
                           else JOBS[name]["logits"].dtype)
    finite = want[3].isfinite().all(-1)
    torch.testing.assert_close(probs.float()[finite], want[3][finite], rtol=2e-2, atol=1e-6)
    torch.testing.assert_close(probs.float()[finite].sum(-1), torch.ones(int(finite.sum())), rtol=0, atol=2e-2)


def test_kernel_seed_is_the_only_randomness(kernel_out):
    a = kernel_out["seed5"][2]
    assert torch.equal(a, kernel_out["seed5-block512"][2])  # the chunking does not change the draw
    assert torch.equal(a, kernel_out["seed5-tensor"][2])  # an int seed is shorthand for row_seeds()
    assert (a != kernel_out["seed6"][2]).sum() >= 12
    assert a.unique().numel() >= 12  # rows of one call draw independently
    _check(kernel_out["seed5"], _reference(JOBS["seed5"]))


def test_launcher_checks_its_inputs(monkeypatch):
    pytest.importorskip("triton")
    from engine.kernels import vocab_pass

    # The interpreter switch lets CPU tensors through; every check below fails before a launch.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(4, 64)
    with pytest.raises(AssertionError, match="must be \\(R, V\\)"):
        vocab_pass(x[None], 1.0, None, 0)
    with pytest.raises(AssertionError, match="dtype"):
        vocab_pass(x.double(), 1.0, None, 0)
    with pytest.raises(AssertionError, match="contiguous"):
        vocab_pass(torch.randn(64, 4).t(), 1.0, None, 0)
    with pytest.raises(AssertionError, match="inv_temperature"):
        vocab_pass(x, torch.ones(3), None, 0)
    with pytest.raises(AssertionError, match="seeds"):
        vocab_pass(x, 1.0, None, torch.zeros(4, dtype=torch.int32))
    with pytest.raises(AssertionError, match="softcap"):
        vocab_pass(x, 1.0, 0.0, 0)
    with pytest.raises(AssertionError, match="block"):
        vocab_pass(x, 1.0, None, 0, block=100)
    with pytest.raises(AssertionError, match="probs_out"):
        vocab_pass(x, 1.0, None, 0, probs_out=torch.empty(4, 32))
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(AssertionError, match="CUDA"):
        vocab_pass(x, 1.0, None, 0)


def test_kernel_compiles_for_hopper(monkeypatch, tmp_path):
    # Triton's front end and bundled ptxas need no GPU: this catches codegen errors the interpreter misses.
    triton = pytest.importorskip("triton")
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 3):
        pytest.skip("ASTSource signature format of Triton >= 3.3")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from engine.kernels.vocab_pass import _vocab_pass_kernel, interpreting

    if interpreting():
        pytest.skip("the kernel module was built for the interpreter")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    signature = dict(
        logits_ptr="*bf16", inv_t_ptr="*fp32", seed_ptr="*i64",
        entropy_ptr="*fp32", argmax_ptr="*i64", sample_ptr="*i64", probs_ptr="*bf16",
        V="i32", row_stride="i32", probs_stride="i32", softcap="fp32", HAS_SOFTCAP="constexpr",
        WRITE_PROBS="constexpr", BLOCK="constexpr",
    )  # fmt: skip
    source = ASTSource(_vocab_pass_kernel, signature, constexprs=dict(HAS_SOFTCAP=True, WRITE_PROBS=True, BLOCK=4096))
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8))
    assert "st.local" not in compiled.asm["ptx"]  # no register spills


def test_imports_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, engine.kernels as k\n"
        "assert not k.available()\n"
        "try:\n    k.vocab_pass(torch.zeros(2, 8), 1.0, None, 0)\n"
        "except RuntimeError as e:\n    assert 'vocab_pass_torch' in str(e)\n"
        "else:\n    raise SystemExit('no error')\n"
        "from engine.denoising.sampler import vocab_pass_torch\n"
        "print(vocab_pass_torch(torch.zeros(2, 8), torch.tensor(1.0), 30.0, torch.arange(2))[1].tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 0]"


# --- the oracle itself --------------------------------------------------------------------------------------


def test_processed_logits_and_entropy_follow_transformers():
    logits = torch.randn(3, 500) * 20
    z = processed_logits(logits, 1 / 0.6, 30.0)
    # DiffusionGemmaForBlockDiffusion.forward soft-caps; the temperature logits processor divides by T.
    torch.testing.assert_close(z, torch.tanh(logits / 30.0) * 30.0 / 0.6, rtol=1e-6, atol=1e-5)
    entropy, argmax, _, probs = vocab_pass_reference(logits, 1 / 0.6, 30.0, 0)
    categorical = torch.distributions.Categorical(logits=z)  # what accept_canvas and the stopping rule use
    torch.testing.assert_close(entropy, categorical.entropy(), rtol=1e-5, atol=1e-6)
    assert torch.equal(argmax, z.argmax(-1))
    torch.testing.assert_close(probs, categorical.probs, rtol=1e-5, atol=1e-7)


def test_noise_is_standard_gumbel():
    h = noise_bits(row_seeds(11, 64, "cpu"), 4096)  # 2**18 draws
    assert h.min() >= 0 and h.max() < 2**32
    g = gumbel_from_bits(h).double()
    assert g.isfinite().all()
    assert abs(g.mean().item() - 0.5772157) < 0.012  # Euler's constant; ~5 standard errors
    assert abs(g.var().item() - torch.pi**2 / 6) < 0.035


def test_gumbel_tail_keeps_its_digits():
    # The largest draws decide a Gumbel-max over V ~ 262k columns: they must not be rounded to coarse steps.
    spread = torch.randint(0, 2**32, (4096,), generator=torch.Generator().manual_seed(0))
    h = torch.cat([torch.arange(4096), spread, torch.tensor([2**32 - 2**9])])
    g = gumbel_from_bits(h)
    assert g[:4096].unique().numel() == 4096  # the 4096 largest possible values are all distinct
    v = (h.float() + 1.0) * 2.0**-32  # the fp32 uniform both implementations start from
    exact = -torch.log(-torch.log1p(-v.double()))
    torch.testing.assert_close(g.double(), exact, rtol=0, atol=2e-5)


def _chi2(samples: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * samples.numel()
    observed = torch.bincount(samples, minlength=probs.numel()).double()
    return float(((observed - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("softcap,temperature", [(None, 1.0), (30.0, 0.5)])
def test_reference_sampler_matches_softmax(softcap, temperature):
    base = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, 0.8, 1.2, 0.3]]) * 1.5  # V = 10, no tiny cells
    probs = processed_logits(base, 1 / temperature, softcap).double().softmax(-1)[0]
    draws = 4000
    logits = base.expand(draws, -1).contiguous()
    by_row = vocab_pass_reference(logits, 1 / temperature, softcap, 2024)[2]  # one seed, rows differ
    by_seed = vocab_pass_reference(logits, 1 / temperature, softcap, torch.arange(draws))[2]  # seeds 0, 1, ..
    assert _chi2(by_row, probs) < CHI2_999[9]
    assert _chi2(by_seed, probs) < CHI2_999[9]


def test_reference_draws_of_neighbouring_rows_are_independent():
    draws = 4000
    s = vocab_pass_reference(torch.zeros(2 * draws, 4), 1.0, None, 77)[2].view(draws, 2)  # uniform over 4
    pairs = s[:, 0] * 4 + s[:, 1]  # 16 cells, uniform when the two rows are independent
    assert _chi2(pairs, torch.full((16,), 1 / 16, dtype=torch.float64)) < CHI2_999[15]


# --- the sampler seam: one signature, the same case through each backend ---------------------------------------


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_vocab_pass_backends_follow_the_oracle(kernel_out, backend):
    from engine.denoising.sampler import vocab_pass_for

    job = JOBS["seam"]
    if backend == "triton":  # the interpreted kernel's result, computed in the child process
        entropy, argmax, sample, probs = kernel_out["seam"]
    else:
        logits = job["logits"].clone()
        entropy, argmax, sample, probs = vocab_pass_for(backend)(logits, torch.tensor(job["inv_temperature"]),
                                                                 job["softcap"], job["seed"])
    want = _reference(job)
    torch.testing.assert_close(entropy, want[0], **ENTROPY_TOL)
    # argmax: the oracle's, or a column whose processed logit is within fp32 rounding of the cap (the eager
    # backend soft-caps through sigmoid: rows of 1e-30 logits all round to one value there)
    z = processed_logits(job["logits"], job["inv_temperature"], job["softcap"])
    rows = torch.arange(z.shape[0])
    assert (z[rows, argmax] >= z[rows, want[1]] - 1e-5 * job["softcap"]).all()
    assert (argmax == want[1]).float().mean() >= 0.8
    torch.testing.assert_close(probs.float(), want[3], rtol=1e-4, atol=1e-6)
    assert (want[3].gather(1, sample[:, None]) > 0).all()  # never a zero-probability (masked) column
    if backend == "triton":
        assert torch.equal(sample, want[2])  # the kernel's draws are its oracle's, bit for bit


def test_torch_vocab_pass_samples_the_softmax_and_follows_its_seeds():
    from engine.denoising.sampler import vocab_pass_torch

    base = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, 0.8, 1.2, 0.3]])  # V = 10, no tiny cells
    logits = base.expand(4000, -1).contiguous()
    inv_t = torch.tensor(1 / 0.7)
    seeds = torch.arange(4000, dtype=torch.int64) * 7919
    sample = vocab_pass_torch(logits, inv_t, 30.0, seeds).sample
    assert _chi2(sample, processed_logits(base, 1 / 0.7, 30.0).double().softmax(-1)[0]) < CHI2_999[9]
    assert torch.equal(sample, vocab_pass_torch(logits, inv_t, 30.0, seeds).sample)
    assert (sample != vocab_pass_torch(logits, inv_t, 30.0, seeds + 1).sample).sum() > 1000


# --- on a GPU -----------------------------------------------------------------------------------------------


def _assert_same_choice(got: torch.Tensor, want: torch.Tensor, scores: torch.Tensor, slack: float) -> None:
    # GPU exp/log are approximate (a few ulp), so a pick may differ from the oracle's only at a near-tie.
    diff = (got != want).nonzero().flatten()
    gap = scores[diff, want[diff]] - scores[diff, got[diff]]
    assert diff.numel() <= max(1, got.numel() // 100) and (gap.abs() <= slack).all(), (diff, gap)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_reference_on_gpu(dtype):
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from engine.kernels import vocab_pass

    rows, vocab = 64, 262_144  # DiffusionGemma's vocabulary
    logits = (torch.randn(rows, vocab, device="cuda") * 8).to(dtype)
    logits[1, ::3] = logits[1].max()  # ties
    got = vocab_pass(logits, 1 / 0.6, 30.0, 42)
    want = vocab_pass_reference(logits, 1 / 0.6, 30.0, 42)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    z = processed_logits(logits, 1 / 0.6, 30.0)
    _assert_same_choice(got[1], want[1], z, slack=1e-4)
    g = gumbel_from_bits(noise_bits(row_seeds(42, rows, "cuda"), vocab))
    _assert_same_choice(got[2], want[2], z + g, slack=1e-4)
