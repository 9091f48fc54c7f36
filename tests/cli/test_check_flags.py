"""`dg-lsp --check`: a model that will not load is one JSON line (ok false) and one line on stderr, exit 1;
`--device cuda` on a machine without CUDA the same; the working directory is indexed only when --workspace names
it (it once indexed the cwd: 31 s from /tmp, with the file names found there in its output)."""

from __future__ import annotations

import json

from cli_harness import run


def test_a_model_folder_that_does_not_exist_is_one_line_and_exit_1(tmp_path):
    out = run(["--check", "--model", str(tmp_path / "nope")], tmp_path)
    assert out.returncode == 1
    report = json.loads(out.stdout)  # one JSON object, one line
    assert len(out.stdout.strip().splitlines()) == 1 and report["ok"] is False
    assert "does not exist" in report["error"]
    assert len(out.stderr.strip().splitlines()) == 1 and "does not exist" in out.stderr
    assert "Traceback" not in out.stderr


def test_device_cuda_without_cuda_is_one_line_and_exit_1(tmp_path):
    out = run(["--check", "--device", "cuda"], tmp_path)  # the harness hides every GPU
    assert out.returncode == 1 and json.loads(out.stdout)["ok"] is False
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1 and "no CUDA device" in line and "Traceback" not in line


def test_the_working_directory_is_indexed_only_with_workspace(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "secret_helpers_module.py").write_text("def helper():\n    return 1\n")
    (project / "main.py").write_text("from secret_helpers_module import helper\n\nhelper()\n")
    plain = run(["--check", "--device", "cpu"], tmp_path, cwd=project)
    assert plain.returncode == 0, plain.stderr
    report = json.loads(plain.stdout)
    assert report["ok"] and report["device"] == "cpu" and "crossFile" not in report
    assert "secret_helpers_module" not in plain.stdout
    indexed = run(["--check", "--workspace", str(project)], tmp_path)
    assert indexed.returncode == 0, indexed.stderr
    cross = json.loads(indexed.stdout)["crossFile"]
    assert cross["files"] == 2 and cross["root"] == str(project.resolve())
