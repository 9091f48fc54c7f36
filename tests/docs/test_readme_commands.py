"""Every command in the README's user sections is exercised here, so none goes stale; a command added there
without a row in `HOW` fails `test_every_command_has_a_way_to_be_exercised`.

How each is exercised (the `HOW` table): "run" runs the exact line with bash in a sandbox (fresh HOME, an empty
working folder, this checkout's `dg-lsp` on PATH) and checks its output; "record" runs the exact line with bash
where the real thing would download gigabytes or needs a GPU or an editor, with a recorder in the tool's place: for
`hf` the recorder runs hf's own command line and records the download it would start (repository, patterns,
folder), for `dg-lsp` the recorded arguments go through dg-lsp's own parser, for `vllm` and `code` the arguments
are checked against what vLLM 0.33 reads and what the extension's build writes, for `pipx` its `--pip-args` go
through pip's own parser; "make" checks the Makefile or package.json target the line runs; "help" runs the line with
`--help` where running it for real installs something (tests/install/test_user_install.py installs for real).
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from readme_commands import ROOT, Command, Sandbox, fenced_blocks, json_settings, shell_commands, user_part

MAX_USER_LINES = 300
FP8 = "RedHatAI/diffusiongemma-26B-A4B-it-FP8-dynamic"
BF16 = "google/diffusiongemma-26B-A4B-it"
GGUF = "unsloth/diffusiongemma-26B-A4B-it-GGUF"
# The vLLM 0.33 options the README's launch uses (REFERENCE §7 and vLLM 0.33.0's cli_args / engine arg_utils). No
# vLLM here to ask: a flag outside this list is a flag nobody checked.
VLLM_FLAGS = {"--host", "--port", "--api-key", "--max-num-seqs", "--attention-backend", "--enable-chunked-prefill",
              "--generation-config", "--diffusion-config"}


@dataclass(frozen=True)
class Row:
    pattern: str  # the whole command matches it
    mode: str  # run | record | make | help
    check: Callable[[Command, subprocess.CompletedProcess[str] | None, Sandbox], None]
    how: str


def run_line(box: Sandbox, cmd: Command, earlier: list[Command], recorded: bool) -> subprocess.CompletedProcess[str]:
    """The line with bash, after the `export`s that come before it in its block (as a user's shell would hold)."""
    exports = [c.text for c in earlier if c.block == cmd.block and c.text.startswith("export ")]
    script = "set -e\n" + "\n".join([*exports, cmd.text]) + "\n"
    cwd = ROOT if "scripts/" in cmd.text else box.work  # run in the clone, as the README says; else an empty folder
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=box.env(recorded), capture_output=True,
                          text=True, timeout=120)


def last_record(box: Sandbox, name: str) -> dict:
    recs = [r for r in box.recorded() if r["name"] == name]
    assert recs, f"{name} was not called"
    return recs[-1]


# -- checks ---------------------------------------------------------------------------------------------------

def ok_version(cmd, proc, box):
    assert proc.returncode == 0, proc.stderr
    assert re.match(r"dg-lsp \S+", proc.stdout), proc.stdout


def check_json(proc) -> dict:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"] is True and out["model"].endswith("default_model"), out
    return out


def ok_check(cmd, proc, box):
    out = check_json(proc)
    assert "crossFile" not in out, out["crossFile"]  # no --workspace: no folder is indexed


def ok_check_workspace(cmd, proc, box):
    out = check_json(proc)
    assert out["device"] == "cpu", out["device"]
    assert out["crossFile"]["root"] == str(box.work), out["crossFile"]  # `.`: the folder it was run in


def section(title: str) -> str:
    """A `## title` section of the user part, without its fenced blocks (the prose)."""
    text = user_part()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return re.sub(r"^```.*?^```", "", text[start:end if end > 0 else None], flags=re.M | re.S)


def ok_top_help(cmd, proc, box):
    """`dg-lsp --help` lists every command dg-lsp has (each named in the README's section) and every option the
    section names."""
    from dg_lsp.__main__ import SUBCOMMANDS

    assert proc.returncode == 0, proc.stdout + proc.stderr
    prose = section("The command line")
    for name in SUBCOMMANDS:
        assert re.search(rf"^\s+{name}\s", proc.stdout, re.M), (name, proc.stdout)
        assert f"`{name}`" in prose, f"the README's command line section does not name `{name}`"
    options = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", prose))
    assert {"--check", "--device", "--workspace", "--log-file"} <= options, options
    assert not {o for o in options if o not in proc.stdout}, options


def ok_doctor(cmd, proc, box):
    from dg_lsp.server import server_version

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"dg-lsp {server_version()}" in proc.stdout, proc.stdout[:500]  # the report names what to paste in an issue


def ok_export_key(cmd, proc, box):
    assert proc.returncode == 0, proc.stderr


def download_dirs(box: Sandbox) -> set[str]:
    """The --local-dir of every hf download in the user part (expanded as the shell does)."""
    dirs = set()
    for c in shell_commands():
        m = re.search(r"--local-dir (\S+)", c.text) if c.text.startswith("hf download") else None
        if m:
            dirs.add(m.group(1).replace("~", str(box.home), 1))
    return dirs


def ok_check_model(cmd, proc, box):
    from dg_lsp.__main__ import parse_args

    argv = last_record(box, "dg-lsp")["argv"]
    args = parse_args(argv)  # dg-lsp's own parser: a SystemExit here is a usage error
    assert args.check and args.model, argv
    assert args.model in download_dirs(box), f"{args.model} is not a folder a README download writes"


def ok_hf(cmd, proc, box):
    assert proc.returncode == 0, proc.stderr
    rec = last_record(box, "hf")
    assert rec["exit"] == 0 and not rec["warnings"], rec  # e.g. "Ignoring `--include` since filenames ..."
    call = rec.get("call")
    assert call and call["fn"] == "snapshot_download", rec
    assert call["repo_id"] in (FP8, BF16, GGUF), call["repo_id"]
    assert call["local_dir"] and call["local_dir"].startswith(str(box.home / "models")), call
    patterns = call["allow_patterns"]
    if call["repo_id"] == GGUF:  # the Q4_K_M file(s) only
        names = [f"diffusiongemma-26B-A4B-it-{q}.gguf" for q in ("Q4_K_M", "Q5_K_M", "Q8_0", "BF16")]
        assert [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)] == [names[0]], patterns
    elif patterns is not None:  # the tokenizer files for a vLLM client: json and the chat template, no weights
        for name, wanted in (("tokenizer.json", True), ("tokenizer_config.json", True), ("chat_template.jinja", True),
                             ("model-00001-of-00006.safetensors", False)):
            assert any(fnmatch.fnmatch(name, p) for p in patterns) == wanted, (name, patterns)


def ok_vllm(cmd, proc, box):
    assert proc.returncode == 0, proc.stderr
    rec = last_record(box, "vllm")
    argv = rec["argv"]
    assert argv[:2] == ["serve", FP8], argv  # the FP8 checkpoint the section's 32 GB GPU holds, not bf16
    assert rec["env"].get("VLLM_USE_V2_MODEL_RUNNER") == "1"
    flags = [a for a in argv[2:] if a.startswith("--")]
    assert set(flags) <= VLLM_FLAGS, set(flags) - VLLM_FLAGS
    value = dict(zip(argv[2:], argv[3:], strict=False))
    assert set(json.loads(value["--diffusion-config"])) == {"canvas_length", "max_denoising_steps"}
    assert len(value["--api-key"]) == 48 and int(value["--api-key"], 16) >= 0  # the exported key reached it
    served = [s for s in json_settings() if s.get("dg.backend") == "openai"]
    assert served and all(s["dg.model"] == FP8 and s["dg.apiKeyEnv"] == "DG_API_KEY" for s in served), served


def cd_target(cmd: Command) -> Path:
    """The folder an earlier `cd X && ...` line of the same block moved into (the clone's root when none)."""
    folder = ROOT
    for c in COMMANDS[:COMMANDS.index(cmd)]:
        m = re.match(r"cd (\S+) &&", c.text) if c.block == cmd.block else None
        folder = folder / m.group(1) if m else folder
    return folder


def vsix_out(folder: Path) -> Path:
    """Where `npm run package` in `folder` writes the .vsix (package.json's own script)."""
    scripts = json.loads((folder / "package.json").read_text())["scripts"]
    out = re.search(r"--out (\S+)", scripts["package"])
    assert out, scripts["package"]
    return folder / out.group(1)


def ok_vsix_build(cmd, proc, box):
    """Not run (npm ci and a bundle take minutes; tests/editors' VS Code tier packages for real): the folder the
    line moves into holds the extension, whose `package` script writes a .vsix and whose `prepackage` installs the
    build tools a fresh clone lacks (esbuild, vsce) before it."""
    folder = ROOT / re.match(r"cd (\S+) && npm run package$", cmd.text).group(1)
    scripts = json.loads((folder / "package.json").read_text())["scripts"]
    assert vsix_out(folder).suffix == ".vsix"
    deps = re.fullmatch(r"node (\S+\.mjs)", scripts["prepackage"])
    assert deps and "npm" in (folder / deps.group(1)).read_text() and "esbuild" in (folder / deps.group(1)).read_text()


def ok_vsix_install(cmd, proc, box):
    argv = last_record(box, "code")["argv"]
    assert argv[0] == "--install-extension", argv
    folder = cd_target(cmd)  # the line runs where the build line left the shell
    assert folder / argv[1] == vsix_out(folder), (argv, folder)


def ok_pipx(cmd, proc, box):
    """pipx's arguments: the clone (`.`, run in it), the `cuda` extra pyproject declares, and `--pip-args` that pip's
    own parser reads as the CPU index scripts/install.py uses."""
    import shlex
    import tomllib

    from pip._internal.commands import create_command

    assert proc.returncode == 0, proc.stderr
    argv = last_record(box, "pipx")["argv"]
    assert argv[0] == "install", argv
    spec = re.fullmatch(r"\.(?:\[(\w+)\])?", argv[-1])
    assert spec, argv
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pip_args = [a.split("=", 1)[1] for a in argv[1:-1] if a.startswith("--pip-args=")]
    if spec.group(1):
        assert spec.group(1) == "cuda" and "cuda" in extras and not pip_args, argv
    else:
        assert len(pip_args) == 1, argv
        opts, rest = create_command("install").parse_args(shlex.split(pip_args[0]))
        cpu_index = re.search(r'^CPU_INDEX = "(\S+)"', (ROOT / "scripts/install.py").read_text(), re.M).group(1)
        assert cpu_index in opts.extra_index_urls and not rest, (opts.extra_index_urls, rest)


def ok_make_demo(cmd, proc, box):
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert recipe and "-m dg_lsp.devtools.demo" in recipe.group(1), "make demo must run dg_lsp.devtools.demo"


def ok_install_help(cmd, proc, box):
    """`python3 scripts/install.py --help`: exit 0, a usage line naming the script (argparse names it by its file
    name), and every option the README's Install section tells the user to give it."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    usage = re.search(r"usage: (\S+)", proc.stdout, re.I)
    assert usage and usage.group(1) == Path(cmd.text.split()[1]).name, proc.stdout[:300]
    options = set(re.findall(r"`(--[a-z][\w-]*)", section("Install")))
    assert options, "the Install section names none of the installer's options"
    assert not {o for o in options if not re.search(rf"^\s+(?:\S+, )?{o}\b", proc.stdout, re.M)}, options


HOW: list[Row] = [
    Row(r"python3 scripts/install\.py", "help", ok_install_help,
        "`python3 scripts/install.py --help` exits 0 with its usage and the options the README names (the "
        "install's own test installs for real)"),
    Row(r'pipx install --pip-args="--extra-index-url \S+" \.|pipx install "\.\[cuda\]"', "record", ok_pipx,
        "recorded: the clone, the cuda extra pyproject declares, pip's own parser reads the CPU index"),
    Row(r"dg-lsp --version", "run", ok_version, "run: prints `dg-lsp VERSION`"),
    Row(r"dg-lsp --check", "run", ok_check, "run: the shipped model loads and fills, JSON with ok: true"),
    Row(r"dg-lsp --check --model ~/models/[\w.-]+", "record", ok_check_model,
        "recorded: dg-lsp's own parser takes the arguments; the folder is one a README download writes"),
    Row(r"dg-lsp doctor", "run", ok_doctor, "run: the report on this machine, naming dg-lsp's version"),
    Row(r"dg-lsp --help", "run", ok_top_help, "run: every command and every option the section names is listed"),
    Row(r"dg-lsp --check --device cpu --workspace \.", "run", ok_check_workspace,
        "run: JSON with ok: true, on the CPU, having indexed the folder it was run in"),
    Row(r"hf download \S+ .*--local-dir ~/models/[\w.-]+|hf download \S+ --local-dir ~/models/[\w.-]+", "record",
        ok_hf, "recorded: hf's own command line starts a snapshot download of the named repository into ~/models, "
        "with include patterns that take the intended files"),
    Row(r"export DG_API_KEY=\$\(openssl rand -hex 24\)", "run", ok_export_key, "run"),
    Row(r"VLLM_USE_V2_MODEL_RUNNER=1 vllm serve .*", "record", ok_vllm,
        "recorded: the FP8 repository, flags vLLM 0.33 reads, the diffusion config's keys, the exported key, and "
        "the editor settings naming the served model"),
    Row(r"cd editors/vscode && npm run package", "make", ok_vsix_build,
        "not run (npm ci and a bundle take minutes): package.json's prepackage installs the build tools, its "
        "package script writes the .vsix"),
    Row(r"code --install-extension dg-lsp\.vsix", "record", ok_vsix_install,
        "recorded: the .vsix path, from where the build line left the shell, is the one the build writes"),
    Row(r"make demo", "make", ok_make_demo, "the Makefile's demo target runs dg_lsp.devtools.demo "
        "(tests/docs/test_demo.py runs the demo itself)"),
]


def row_for(cmd: Command) -> Row | None:
    hits = [r for r in HOW if re.fullmatch(r.pattern, cmd.text)]
    assert len(hits) <= 1, (cmd.text, [r.pattern for r in hits])
    return hits[0] if hits else None


COMMANDS = shell_commands()


def test_the_user_sections_are_under_300_lines():
    n = len(user_part().splitlines())
    assert n < MAX_USER_LINES, f"the README's user sections are {n} lines"


def test_every_command_has_a_way_to_be_exercised():
    assert COMMANDS, "no shell command found in the README's user sections"
    missing = [c.text for c in COMMANDS if row_for(c) is None]
    assert not missing, f"README commands with no row in HOW (tests/docs/test_readme_commands.py): {missing}"
    unused = [r.pattern for r in HOW if not any(re.fullmatch(r.pattern, c.text) for c in COMMANDS)]
    assert not unused, f"rows in HOW that no README command uses: {unused}"


def test_the_settings_snippets_name_real_settings():
    package = json.loads((ROOT / "editors/vscode/package.json").read_text())
    known = set(package["contributes"]["configuration"]["properties"])
    blocks = json_settings()
    assert blocks
    for block in blocks:
        assert set(block) <= known, set(block) - known


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.text[:60] for c in COMMANDS])
def test_readme_command(cmd: Command, tmp_path: Path):
    row = row_for(cmd)
    if row is None:
        pytest.fail(f"no way to exercise {cmd.text!r}: add a row to HOW")
    box = Sandbox.make(tmp_path)
    if row.mode == "help":
        proc = run_line(box, Command(cmd.text + " --help", cmd.block), [], recorded=False)
        row.check(cmd, proc, box)
        return
    proc = None if row.mode == "make" else run_line(box, cmd, COMMANDS[:COMMANDS.index(cmd)], row.mode == "record")
    row.check(cmd, proc, box)


def test_the_editor_snippets_point_at_the_plugin_and_its_options():
    """Lua and Emacs Lisp are not shell: read, not run. The Neovim snippets load the plugin folder of this
    repository and pass options its config knows; the Emacs snippet starts a `dg-lsp` by absolute path."""
    blocks = [(lang, body) for lang, body in fenced_blocks(user_part()) if lang in ("lua", "elisp")]
    assert {lang for lang, _ in blocks} == {"lua", "elisp"}, blocks
    defaults = (ROOT / "editors/neovim/lua/dg/config.lua").read_text()
    for lang, body in blocks:
        if lang == "lua":
            folder = re.search(r'(?:dir = |rtp:append\()"~/src/dg-lsp/([^"]+)"', body)
            assert folder and (ROOT / folder.group(1) / "lua/dg/init.lua").is_file(), body
            for option in re.findall(r"(?:opts = \{|setup\(\{) *(\w+) =", body):
                assert re.search(rf"^\s+{option} = ", defaults, re.M), (option, body)
            assert 'main = "dg"' in body or 'require("dg")' in body
        else:
            assert re.search(r'eglot-server-programs .*\("/path/to/dg-lsp"\)', body), body
