"""A bench.run result as the markdown page bench/results/latest.md (the README includes it)."""

from __future__ import annotations


def _f(x, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _step_table(key: str, rows: list[dict]) -> list[str]:
    cuda = any("cuda_max_allocated_mb" in r for r in rows)
    head = f"| {key} | ms / step | canvas ms (16 steps) | tokens/s |" + (" CUDA peak MB |" if cuda else "")
    out = [head, "|---:|---:|---:|---:|" + ("---:|" if cuda else "")]
    for r in rows:
        line = f"| {r[key]:,} | {_f(r['ms_per_step'], 2)} | {_f(r['canvas_ms'])} | {_f(r['tokens_per_s'], 0)} |"
        out.append(line + (f" {_f(r.get('cuda_max_allocated_mb'), 0)} |" if cuda else ""))
    return out


def engine_section(e: dict) -> list[str]:
    m = e["model"]
    ctx_note = "real Python source (stdlib), suffix-first prompt" if m["real_code_contexts"] else "random ids"
    out = [
        f"**Model for every engine figure:** {m['label']} — {m['params_m']}M parameters, vocabulary {m['vocab']:,}, "
        f"{m['layers']} layers, hidden {m['hidden']}, {m['experts']} experts top-{m['top_k']}, sliding window "
        f"{m['sliding_window']}; {m['device']} {m['dtype']}. Contexts: {ctx_note}.",
        "",
        "### Step time vs canvas length",
        "",
        f"Context {e['canvas_sweep'][0]['context']} tokens (cached). ms/step: median over "
        f"{e['canvas_sweep'][0]['steps']}-step runs, configurations run round-robin; canvas ms and tokens/s are for "
        "a canvas denoised in 16 steps (vLLM's published setting).",
        "",
        *_step_table("canvas", e["canvas_sweep"]),
        "",
        "### Step time vs context length",
        "",
    ]
    cs = e["context_sweep"]
    rows = cs["rows"]
    out += [
        f"Canvas {rows[0]['canvas']}, context already in the KV cache (the step reads it); measured as above.",
        "",
        *_step_table("context", rows),
    ]
    if cs.get("capped_at"):
        out += ["", f"Capped: contexts from {cs['capped_at']:,} tokens up were not run (the sweep's "
                    f"{cs['budget_s']:.0f} s CPU budget was used up)."]
    out += [
        "",
        "### Parallel acceptance vs one token per step",
        "",
        "parallel and one-per-step get the same step budget (= canvas length, enough for one-per-step to fill the "
        "canvas) and the checkpoint's entropy bound; default-steps is parallel with the checkpoint's own budget (what "
        "the server runs). The stability rule may end any of them early. The modes alternate on each of a few "
        f"contexts of {e['acceptance'][0].get('context', '?')} tokens (medians; the model's trained context length "
        "when it declares one); tokens/s = canvas tokens / denoising time.",
        "",
        "| canvas | mode | step budget | steps / canvas | tokens accepted / step | canvas ms | tokens/s |",
        "|---:|---|---:|---:|---:|---:|---:|",
        *(f"| {r['canvas']} | {r['mode'].replace('_', '-')} | {r.get('step_budget', '-')} | "
          f"{r['steps_per_canvas']:.0f} | {r['tokens_accepted_per_step']:.2f} | {_f(r['canvas_ms'])} | "
          f"{_f(r['tokens_per_s'], 0)} |"
          for r in e["acceptance"]),
        "",
    ]
    t = e["vs_transformers"]
    out += [
        "### Engine vs transformers `generate` (same checkpoint, same run, interleaved)",
        "",
        f"Context {t['context']} encoded cold on every run (no prefix cache), canvas {t['canvas']}, {t['steps']} "
        "steps, stopping rule off; ms/step = whole fill / steps (bench/engine_speed.py).",
        "",
        "| implementation | ms / step | canvas ms |",
        "|---|---:|---:|",
        f"| engine | {_f(t['engine_ms_per_step'], 2)} | {_f(t['engine_canvas_ms'])} |",
        f"| engine, reference-compatible mode | {_f(t['engine_reference_mode_ms_per_step'], 2)} | - |",
        f"| transformers generate | {_f(t['transformers_ms_per_step'], 2)} | {_f(t['transformers_canvas_ms'])} |",
        "",
        f"Speedup: **{t['speedup_vs_transformers']:.2f}x**.",
        "",
    ]
    p = e["prefix_cache"]
    out += [
        "### Encoder: cold vs prefix cache",
        "",
        f"A keystroke at the end of the prefix of a {p['context']:,}-token suffix-first context: cold encode "
        f"**{_f(p['cold_encode_ms'])} ms**, with the prefix cache **{_f(p['keystroke_encode_ms'])} ms** "
        f"({p['reused_prefix_tokens']:,.0f} tokens reused, {p['speedup']:.0f}x); encode + first step: "
        f"{_f(p['cold_total_ms'])} ms cold, {_f(p['keystroke_total_ms'])} ms after the keystroke (this is the "
        "engine's time to first draft).",
        "",
    ]
    c = e.get("cancel")
    if c:
        out += ["### Cancellation (engine)", "",
                f"CancelToken.cancel() from another thread at a random point of a fill (context {c['context']}, canvas "
                f"{c['canvas']}, {_f(c['ms_per_step'])} ms/step): infill returns after **{_f(c['cancel_ms_p50'])} ms** "
                f"median, {_f(c['cancel_ms_max'])} ms worst; at most {c['steps_after_cancel_max']} step(s) finished "
                "after the cancel.", ""]
    return out


EDITOR_ROWS = [
    ("keystrokes", "keystrokes replayed", 0),
    ("server_overhead_ms_p50", "server overhead p50 (ms): server-side, didChange in -> answer handed to the OS, "
                               "minus engine and the idle wait for the client's request", 2),
    ("server_overhead_ms_p95", "server overhead p95 (ms)", 2),
    ("window_ms_p50", "didChange in -> write returned, minus engine, p50 (ms; holds the client's time)", 2),
    ("window_ms_p95", "didChange in -> write returned, minus engine, p95 (ms)", 2),
    ("round_trip_overhead_ms_p50", "client round trip minus engine p50 (ms, includes the Python client)", 2),
    ("round_trip_overhead_ms_p95", "client round trip minus engine p95 (ms)", 2),
    ("stale_tree_share", "share of back-to-back keystrokes answered from the last tree (reparse deferred)", 3),
    ("stale_tree_share_e2e", "the same with the 75 ms debounce", 3),
    ("overhead_without_postprocess_ms_p95", "server overhead without post-processing p95 (ms)", 2),
    ("handler_ms_p95", "handler only p95 (ms)", 2),
    ("canvas_ms_p95", "canvas building p95 (ms)", 2),
    ("postprocess_ms_p95", "post-processing p95 (ms)", 2),
    ("typed_ahead_ms_p50", "typed-ahead round trip p50 (ms, no model: the per-keystroke floor)", 2),
    ("typed_ahead_ms_p95", "typed-ahead round trip p95 (ms)", 2),
    ("e2e_ms_p50", "keystroke to item p50 (ms, default settings, 75 ms debounce included)", 1),
    ("e2e_ms_p95", "keystroke to item p95 (ms)", 1),
    ("e2e_cold_ms_p50", "first keystroke at a new place p50 (ms, cold KV cache)", 1),
    ("e2e_prefix_cache_ms_p50", "following keystrokes p50 (ms, prefix KV cache)", 1),
    ("engine_ms_p50", "engine time per request p50 (ms)", 1),
    ("steps_after_cancel_max", "denoising steps after a cancel (max)", 0),
    ("load_s", "model load (s)", 1),
]


def _editor(ed: dict) -> list[str]:
    if not ed or "skipped" in ed:
        return ["### Editor latency", "", f"Not measured: {(ed or {}).get('skipped', 'skipped')}.", ""]
    rows = [(label, ed[k], d) for k, label, d in EDITOR_ROWS if ed.get(k) is not None]
    head = f"Model: {ed['model']}; file: {ed['file']} ({ed['lines']:,} lines); " if "file" in ed else ""
    head += "quick replay. " if ed.get("quick") else "full replay. "
    out = ["### Editor latency (bench/lsp_latency.py: replayed typing through the real server over stdio)", "",
           f"{head}Histogram/CDF: keystroke_latency.png.", "",
           "| metric | value |", "|---|---:|", *(f"| {k} | {_f(v, d)} |" for k, v, d in rows), ""]
    if ed.get("stages_ms"):
        out += ["Server overhead by stage (dg/status `stagesMs`; contiguous, they add up to the overhead):", "",
                "| stage | p50 ms | p95 ms |", "|---|---:|---:|",
                *(f"| {k} | {_f(a, 2)} | {_f(b, 2)} |" for k, (a, b) in ed["stages_ms"].items()), ""]
    return out


def _memory(mem: dict) -> list[str]:
    if not mem:
        return []
    out = ["### Peak memory per configuration (one subprocess each)", "", f"Model: {mem['model']}.", "",
           "| configuration | context | canvas | peak RSS MB | CUDA max allocated MB |", "|---|---:|---:|---:|---:|"]
    names = {"load": "model loaded", "engine": "engine fill (4 steps)", "transformers": "transformers generate"}
    for r in mem["rows"]:
        if "error" in r:
            out.append(f"| {names[r['kind']]} | {r['context']} | {r['canvas']} | error: {r['error']} | - |")
            continue
        out.append(f"| {names[r['kind']]} | {r['context'] or '-'} | {r['canvas'] or '-'} | {_f(r['peak_rss_mb'], 0)} "
                   f"| {_f(r.get('cuda_max_allocated_mb'), 0)} |")
    return out + [""]


def markdown(result: dict, json_name: str) -> str:
    m = result["machine"]
    out = [
        "## Benchmarks",
        "",
        f"`{result['command'].strip()}` on {result['date'][:16].replace('T', ' ')}, host `{result['host']}`: "
        f"{m['cpu']}, {m['cores']} cores ({m['torch_threads']} torch threads), device {m['device']}, torch "
        f"{m['torch']}, transformers {m['transformers']}, Python {m['python']}. Runtime {result['runtime_s']:.0f} s. "
        f"Raw numbers: [{json_name}]({json_name}). Medians; one warm-up per configuration excluded; fixed seeds. "
        "On a shared machine (a virtual machine's cores, other jobs) absolute times are noisy; ratios measured "
        "interleaved in one run are the robust part. One torch thread: on a 2-core machine two "
        "threads made steps several times slower and erratic (they wait on each other while another job holds a "
        "core).",
        "",
        *engine_section(result["engine"]),
        *_editor(result.get("editor")),
        *_memory(result.get("memory")),
        "### Plots",
        "",
        *(f"![{p.removesuffix('.png').replace('_', ' ')}]({p})" for p in result.get("plots", [])),
        "",
    ]
    return "\n".join(out)
