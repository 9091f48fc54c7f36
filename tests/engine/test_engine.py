"""Engine API: streaming, cancellation between steps, prefix-cache reuse, text form, argument errors."""

import threading

import pytest

from engine.engine import Engine
from engine.seam import CancelToken


@pytest.fixture(scope="module")
def eng(tiny_mixed):
    return Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32")


def test_stream_yields_a_draft_per_step_then_the_result(eng):
    ctx = eng.context_ids("def add(a, b):\n    return ", "\n")
    drafts = list(eng.stream(ctx, canvas_length=16, steps=5, seed=3))
    assert [d.step for d in drafts[:-1]] == list(range(1, len(drafts)))
    final = drafts[-1]
    assert final.done and final.result is not None
    assert final.result.steps == len(drafts) - 1 <= 5
    assert final.result.ids == drafts[-2].ids  # the result is the last argmax draft
    assert final.result.text == eng.decode(final.result.ids)


def test_same_seed_same_fill_and_prefix_cache_gives_same_fill(eng):
    head = "".join(f"import mod{i}\n" for i in range(60))
    ctx = eng.context_ids(head + "\ndef main():\n    ", "\n    return 0\n")
    assert len(ctx) > 2 * eng.encode_chunk
    eng.clear_prefix_cache()
    cold = eng.infill(ctx, canvas_length=16, steps=6, seed=5)
    assert cold.reused_prefix_tokens == 0
    warm = eng.infill(ctx, canvas_length=16, steps=6, seed=5)
    assert warm.reused_prefix_tokens == len(ctx)
    assert warm.ids == cold.ids
    # a keystroke at the end of the context: only the tail is re-encoded, and the fill equals a cold run
    typed = ctx[:-1] + eng.encode("x") + ctx[-1:]
    partial = eng.infill(typed, canvas_length=16, steps=6, seed=5)
    # reuse restarts at a chunk boundary, so the re-encoded chunks are bit-identical to a cold encode
    assert len(ctx) - 1 - eng.encode_chunk < partial.reused_prefix_tokens < len(typed)
    assert partial.reused_prefix_tokens % eng.encode_chunk == 0
    eng.clear_prefix_cache()
    assert eng.infill(typed, canvas_length=16, steps=6, seed=5).ids == partial.ids


def test_cancel_stops_within_one_step(eng):
    ctx = eng.context_ids("x = ", "\n")
    token = CancelToken()
    seen = []

    def on_step(draft):
        seen.append(draft.step)
        if draft.step == 2:
            token.cancel()

    res = eng.infill(ctx, canvas_length=16, steps=40, seed=0, cancel=token, on_step=on_step,
                     entropy_bound=1e-9)  # tiny bound: no early stop
    assert res.cancelled
    assert res.steps == 2  # cancel raised during step 2; no further step ran


def test_cancel_from_another_thread(eng):
    ctx = eng.context_ids("x = ", "\n")
    token = CancelToken()
    started = threading.Event()
    steps_after = []

    def on_step(draft):
        if token.cancelled:
            steps_after.append(draft.step)
        started.set()

    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", eng.infill(
        ctx, canvas_length=16, steps=200, seed=0, cancel=token, on_step=on_step, entropy_bound=1e-9)))
    t.start()
    assert started.wait(30)
    token.cancel()
    t.join(60)
    assert out["r"].cancelled and out["r"].steps < 200
    assert len(steps_after) <= 1


def test_one_token_per_step_baseline_accepts_one(eng):
    res = eng.infill(eng.context_ids("a", "b"), canvas_length=16, steps=4, seed=0, one_per_step=True)
    assert res.tokens_accepted_per_step == 1.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(context_ids=[]), "must not be empty"),
    (dict(context_ids=[10**9]), "context ids"),
    (dict(context_ids=[2], steps=0), "steps"),
    (dict(context_ids=[2], canvas_length=-1), "canvas_length"),
    (dict(context_ids=[2], max_canvases=0), "max_canvases"),
    (dict(context_ids=[2], entropy_bound=-1.0), "entropy_bound"),
])
def test_bad_arguments_are_clear_errors(eng, kwargs, match):
    with pytest.raises(ValueError, match=match):
        eng.infill(**kwargs)


def test_text_round_trip_and_prompt_layout(eng):
    text = "déjà vu 😀 日本語\n\tx = [1, 2]\n"
    assert eng.decode(eng.encode(text)) == text
    fmt = eng.infill_format
    ctx = eng.context_ids("PRE", "SUF")
    assert ctx[0] == fmt.bos_id and ctx[1] == fmt.fim_suffix_id and ctx[-1] == fmt.fim_middle_id
    assert ctx.index(fmt.fim_prefix_id) == 2 + len(eng.encode("SUF"))


def test_triton_sampler_path_runs_in_the_interpreter(tiny_mixed):
    """The CUDA sampling path (fused Triton vocab pass) wired into the engine loop, run on CPU by Triton's
    interpreter in a child process (the interpreter must be chosen before triton is first imported)."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    code = f"""
import json, torch
from engine.engine import Engine
eng = Engine.from_pretrained({str(tiny_mixed)!r}, device="cpu", sampler_backend="triton")
ctx = eng.context_ids("def add(a, b):", "")
a = eng.infill(ctx, canvas_length=16, steps=3, seed=1)
b = eng.infill(ctx, canvas_length=16, steps=3, seed=1)
c = eng.infill(ctx, canvas_length=16, steps=3, seed=2)
print(json.dumps({{"a": a.ids, "b": b.ids, "c": c.ids, "steps": a.steps}}))
"""
    env = dict(os.environ, TRITON_INTERPRET="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["steps"] >= 1
    assert res["a"] == res["b"]  # the kernel's noise is a pure function of the seeds
    assert res["a"] != res["c"]
    assert all(0 <= t < 4096 for t in res["a"])


def test_unknown_sampler_backend_is_rejected(tiny_mixed):
    with pytest.raises(ValueError, match="sampler_backend"):
        Engine.from_pretrained(tiny_mixed, device="cpu", sampler_backend="cuda-magic")


def test_trained_context_budget_caps_the_prompt(tmp_path):
    from engine.tokens import InfillFormat

    InfillFormat(max_context_tokens=128).save(tmp_path)
    fmt = InfillFormat.load(tmp_path, None)
    assert fmt.max_context_tokens == 128
    assert fmt.context_budget(1024) == 128 and fmt.context_budget(64) == 64
    assert InfillFormat().context_budget(1024) == 1024
    with pytest.raises(ValueError, match="max_context_tokens"):
        InfillFormat(max_context_tokens=0)


def test_a_large_vocabulary_head_gives_transformers_bits(tmp_path):
    """On CPU the LM head runs as GEMMs of 1,024 vocabulary rows: each logit is still the same dot product."""
    import torch
    from transformers import DiffusionGemmaForBlockDiffusion
    from transformers.cache_utils import DynamicCache

    from engine.model.kv_cache import KVCache
    from engine.testing.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "v3000", "mha_full", vocab_size=3000, with_tokenizer=False)
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    assert eng.model.head_chunk == 1024
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path).eval()
    g = torch.Generator().manual_seed(3)
    ctx, canvas = torch.randint(3, 3000, (1, 20), generator=g), torch.randint(0, 3000, (1, 16), generator=g)
    with torch.no_grad():
        cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ctx, cache=cache)
        want = ref(decoder_input_ids=canvas, cache=cache).logits
    with torch.inference_mode():
        got = eng.model.decode(canvas, eng.model.encode(ctx, KVCache()), None)
    assert torch.equal(got, want)
