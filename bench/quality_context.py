"""Infill quality with context from other files on and off: files of multi-file packages the model never saw, the
prompt built as the server builds it (dg_lsp.fill.prompt.build_prompt, the cross-file snippets from
dg_lsp.context.select over an index of the file's top-level package).

    python -m bench.quality --context [--model DIR] [--holes 100] [--seed 0]

Files: those of the training corpus's held-out split (engine.train.corpus: 1 file in 20 of the standard library)
that sit in a package of three or more .py files, and the files of a few packages installed from PyPI (SITE; not in
the corpus at all). Two sets of holes, each filled three ways:
- "cross_file": calls of a function or class another file of the package defines, reached through an import
  (bench.context.holes_of); the hole is the rest of the line from the name on. Where context should help.
- "any": holes as bench.quality draws them (engine.train.data.HoleDataset: rest of line, statement, block, bracket,
  random span) from the same files. Whether context costs anything elsewhere.
Modes: "off" (crossFileTokens 0: the current file only, the model's trained budget of prefix and suffix); "on" (the
server's default: cross-file snippets take up to half of that budget, the current file the rest); "on_extra" (the
snippets on top of the full in-file budget: a longer context than the model was trained on, which the server does
not do; it separates "the model cannot use the snippets" from "the snippets cost in-file context").
The canvas is the server's choice (dg_lsp.fill.prompt.canvas_length_for); same seed per hole in every mode. Scores as in
bench.quality: exact match (equal after trailing whitespace), edit similarity; for cross_file also whether the needed
definition was in the prompt. The shipped model was trained on single files with a 128-token context.
"""

from __future__ import annotations

import random
import sysconfig
import time
from pathlib import Path

from bench.context import hit, holes_of
from dg_lsp.config import Settings
from dg_lsp.context.index import WorkspaceIndex
from dg_lsp.context.select import Selector
from dg_lsp.documents import Document
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.fill.prompt import build_prompt
from engine.train.corpus import SourceFile, scan, split
from engine.train.data import DataConfig, HoleDataset
from engine.train.evaluate import edit_similarity, exact

MODES = ("off", "on", "on_extra")
SITE = ("pygls", "cattrs", "jinja2", "_pytest", "hypothesis", "huggingface_hub")  # PyPI packages: never trained on


def held_out_files(site: tuple[str, ...] = SITE, min_files: int = 3) -> list[SourceFile]:
    """Files the model never saw that belong to a multi-file package: the corpus's held-out files in a package
    folder (an __init__.py and >= min_files .py files), and every file of `site`'s packages (installed from PyPI)."""
    out = []
    for f in split(scan())[1]:
        pkg = f.path.parent
        if "/" in f.rel and (pkg / "__init__.py").is_file() and sum(1 for _ in pkg.glob("*.py")) >= min_files:
            out.append(f)
    root = Path(sysconfig.get_paths()["purelib"])
    for name in site:
        for path in sorted((root / name).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if path.stat().st_size > 0 and "/tests/" not in f"/{rel}":
                out.append(SourceFile(str(root), rel, path.stat().st_size, ""))
    return out


def top_package(f: SourceFile) -> Path:
    """The top-level package a file belongs to (imports like `email.utils` resolve from there): its index root."""
    return Path(f.root) / f.rel.split("/")[0]


def cross_file_holes(files: list[SourceFile], n: int, seed: int) -> list[tuple]:
    """(package root, file, prefix, middle, suffix, needed name, its file, its line), at most n."""
    out = []
    held = {f.path for f in files}
    for top in sorted({top_package(f) for f in files}):
        for path, offset, name, src, line in holes_of(top):
            if path in held:
                text = path.read_text("utf-8", "replace")
                end = text.find("\n", offset)
                end = len(text) if end < 0 else end
                if text[offset:end].strip():
                    out.append((top, path, text[:offset], text[offset:end], text[end:], name, src, line))
    random.Random(seed).shuffle(out)
    return out[:n]


def any_holes(files: list[SourceFile], tok, fmt, data_cfg: DataConfig, n: int, seed: int) -> list:
    ds = HoleDataset(files, tok, fmt, data_cfg, seed=seed)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        _, index, hole = ds.sample(rng, max(fmt.canvas_lengths) - 1)
        prefix, middle, suffix = hole.split(ds.holes_of(index).text)
        out.append((top_package(files[index]), files[index].path, prefix, middle, suffix, None, None, None))
    return out


class Prompts:
    """The server's prompt for a hole in each mode, with one index per package."""

    def __init__(self, engine) -> None:
        self.fmt, self.encode = engine.prompt_format, engine.encode
        self.budget = self.fmt.context_budget(Settings().context_tokens)
        self.cross = min(Settings().cross_file_budget(), self.budget // 2)  # as dg_lsp.fill.pipeline.run_fill
        self.selectors: dict[Path, Selector] = {}

    def selector(self, pkg: Path) -> Selector:
        if pkg not in self.selectors:
            ix = WorkspaceIndex([pkg], max_files=100_000)
            ix.build()
            self.selectors[pkg] = Selector(ix)
        return self.selectors[pkg]

    def build(self, pkg: Path, path: Path, prefix: str, suffix: str, mode: str):
        text = prefix + suffix
        snap = Document(path.resolve().as_uri(), "python", 1, text).snapshot()
        hole = hole_at_cursor(snap, len(prefix))
        related, current = [], ""
        if mode != "off":
            sel = self.selector(pkg)
            related = sel.select(str(path.resolve()), text, hole.start, self.cross, self.encode).snippets
            current = sel.relpath(str(path.resolve()))
        budget = self.budget + (self.cross if mode == "on_extra" else 0)
        return build_prompt(snap, hole, self.encode, self.fmt, budget, related, current), related


def run(filler, n_holes: int, seed: int, rows_path: Path | None = None) -> tuple[dict, list[dict]]:
    """Fill both sets of holes in every mode; the summary per set and mode, and the per-hole rows (also appended
    to `rows_path` as they come, so a long run stopped early keeps what it did)."""
    import json

    engine = filler.engine
    prompts = Prompts(engine)
    files = held_out_files()
    infill = engine.prompt_format
    data_cfg = DataConfig(context_tokens=prompts.budget, suffix_tokens=32, canvas_lengths=infill.canvas_lengths,
                          canvas_weights=tuple(1.0 for _ in infill.canvas_lengths))
    sets = {"cross_file": cross_file_holes(files, n_holes, seed),
            "any": any_holes(files, filler.tok, infill, data_cfg, n_holes, seed)}
    t0 = time.time()
    rows = []
    # the two sets interleaved: a run stopped early has both
    order = [(name, i, holes[i]) for i in range(n_holes) for name, holes in sets.items() if i < len(holes)]
    for name, i, (pkg, path, prefix, middle, suffix, needed, src, line) in order:
        row = {"set": name, "file": str(path.relative_to(pkg.parent)), "middle": middle}
        for mode in MODES:
            prompt, related = prompts.build(pkg, path, prefix, suffix, mode)
            fill, conf = filler.fill_scored(prompt.context_ids, prompt.canvas_length, seed + i)
            got = {"fill": fill, "exact": exact(fill, middle), "es": edit_similarity(fill, middle),
                   "confidence": conf, "context_tokens": len(prompt.context_ids),
                   "cross_file_tokens": prompt.cross_file_tokens}
            if needed is not None and mode != "off":
                rel = src.resolve().relative_to(pkg.resolve()).as_posix()
                got["needed_in_prompt"] = any(hit(s, rel, {line}, needed) for s in related)
            row[mode] = got
        rows.append(row)
        if rows_path is not None:
            with rows_path.open("a") as out:
                out.write(json.dumps(row) + "\n")
        print(f"  {name} {i + 1}/{len(sets[name])} {row['file']}: " + ", ".join(
            f"{m} {row[m]['es']:.2f}" for m in MODES), flush=True)
    return {"summary": summarize(rows), "files": len(files), "packages": sorted({top_package(f).name for f in files}),
            "cross_file_budget": prompts.cross, "context_budget": prompts.budget,
            "seconds": round(time.time() - t0, 1), "seed": seed}, rows


def summarize(rows: list[dict]) -> dict:
    out = {}
    for name in sorted({r["set"] for r in rows}):
        sel = [r for r in rows if r["set"] == name]
        out[name] = {"holes": len(sel)}
        for mode in MODES:
            got = [r[mode] for r in sel]
            out[name][mode] = {"exact_match": round(sum(g["exact"] for g in got) / len(got), 4),
                               "edit_similarity": round(sum(g["es"] for g in got) / len(got), 4),
                               "with_context": round(sum(g["cross_file_tokens"] > 0 for g in got) / len(got), 3)}
            if mode != "off" and "needed_in_prompt" in got[0]:
                out[name][mode]["needed_in_prompt"] = round(sum(g["needed_in_prompt"] for g in got) / len(got), 3)
        for mode in MODES[1:]:  # paired: the same holes, seeds and canvases
            d = [r[mode]["es"] - r["off"]["es"] for r in sel]
            out[name][f"{mode}_minus_off_es"] = round(sum(d) / len(d), 4)
            out[name][f"{mode}_minus_off_es_ci95"] = round(1.96 * (sum((x - sum(d) / len(d)) ** 2 for x in d)
                                                                   / max(len(d) - 1, 1)) ** 0.5 / len(d) ** 0.5, 4)
            out[name][f"{mode}_minus_off_em"] = round(sum(r[mode]["exact"] - r["off"]["exact"] for r in sel)
                                                      / len(sel), 4)
    return out


def report(filler, n_holes: int, seed: int, rows_path: Path | None) -> dict:
    """bench.quality --context: run, print the table, write the rows if asked; the last line is JSON."""
    import json

    if rows_path is not None:
        rows_path.write_text("")
    result, rows = run(filler, n_holes, seed, rows_path)
    print(f"\n{result['files']} held-out files in {', '.join(result['packages'])}; context budget "
          f"{result['context_budget']} tokens, cross-file {result['cross_file_budget']}")
    print(f"{'set':<11} {'mode':<9} {'EM':>6} {'ES':>6} {'ctx':>5} {'needed':>6}")
    for name, s in result["summary"].items():
        for mode in MODES:
            m = s[mode]
            print(f"{name:<11} {mode:<9} {m['exact_match']:>6.3f} {m['edit_similarity']:>6.3f} "
                  f"{m['with_context']:>5.2f} {m.get('needed_in_prompt', float('nan')):>6.2f}")
        for mode in MODES[1:]:
            print(f"{name:<11} {mode} - off: ES {s[f'{mode}_minus_off_es']:+.4f} "
                  f"(95% CI +-{s[f'{mode}_minus_off_es_ci95']:.4f}), EM {s[f'{mode}_minus_off_em']:+.4f}")
    out = {"holes": {k: v["holes"] for k, v in result["summary"].items()}, **result,
           "backend": filler.backend, "steps": filler.steps}
    print(json.dumps(out))
    return out
