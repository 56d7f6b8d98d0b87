"""The Python lint (scripts/lint_py.sh: ruff with pyflakes' rules) is clean, at the ruff version
CI installs and pyproject.toml requires."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pinned_versions():
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    return (re.findall(r"ruff==([0-9.]+)", ci),
            re.findall(r'required-version\s*=\s*"==([0-9.]+)"', pyproject))


def test_ci_installs_the_ruff_that_pyproject_requires():
    ci, required = pinned_versions()
    assert len(required) == 1 and ci == required, (ci, required)


def test_lint_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (pip install ruff==%s)" % pinned_versions()[1][0])
    version = subprocess.run([ruff, "--version"], capture_output=True, text=True).stdout.split()[-1]
    if version != pinned_versions()[1][0]:
        pytest.skip(f"ruff {version} installed; the lint is defined for {pinned_versions()[1][0]}")
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "lint_py.sh")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lint_py: ruff (pyflakes rules) clean" in r.stdout


def test_no_code_edits_sys_path():
    """The tests, the GPU tools and the shell entry points import through packages
    (mmaemu, mmaemu_tools) and pytest's own test-directory import, never by editing sys.path."""
    needle = "sys.path." + "insert"
    found = []
    for folder in ("test", "mmaemu", "mmaemu_tools", "scripts", "examples"):
        for d, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                if f.endswith((".py", ".sh")):
                    path = os.path.join(d, f)
                    if needle in open(path, encoding="utf-8", errors="replace").read():
                        found.append(os.path.relpath(path, ROOT))
    assert not found, found
