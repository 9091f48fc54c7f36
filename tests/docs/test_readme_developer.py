"""The README's developer part says what the tree does: the test command is CI's, the system packages it names are
the ones `make test` installs (the editor tiers' skip and fail lines send the reader there), and the Layout names
every top-level folder."""

from __future__ import annotations

import re
import subprocess

from readme_commands import DEVELOPER_PART, README, ROOT


def developer_part() -> str:
    text = README.read_text()
    return text[text.index(DEVELOPER_PART):]


def test_the_readme_test_command_is_what_ci_runs():
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == "exec make test", ci  # CI ends in the README's command, with nothing after it
    assert not [line for line in ci if re.search(r"apt-get|pip |npm |pytest", line)], ci  # and does nothing else
    assert "`make test` is what CI runs (`.ci/run` is `make test` alone)" in developer_part()


def test_the_readme_names_the_system_packages_make_test_installs():
    script = (ROOT / "tests/editors/system_packages.sh").read_text()
    installed = set(re.findall(r"missing\+=\(([\w-]+)\)", script))
    assert installed, "tests/editors/system_packages.sh checks no package"
    text = " ".join(developer_part().split())  # wrapped lines read as one
    line = re.search(r"\(`sudo apt-get install -y ([\w -]+)`\)", text)
    assert line and set(line.group(1).split()) == installed, (line and line.group(1), installed)
    assert "Run as root with apt-get, it installs what the editor tests need" in text
    assert "Run by hand, `pytest` skips those tests with the same line." in text


def test_the_layout_names_every_top_level_folder():
    tracked = subprocess.run(["git", "ls-tree", "-d", "--name-only", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    layout = re.search(r"^## Layout\n\n```\n(.*?)^```", developer_part(), re.M | re.S)
    assert layout, "the README has no Layout block"
    named = {m.group(1).split("/")[0] for m in re.finditer(r"^(\S+)\s", layout.group(1), re.M)}
    assert set(tracked) <= named, set(tracked) - named
