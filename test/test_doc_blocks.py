"""Every ```python block of README.md and docs/*.md runs on the CPU.

The blocks of one file run in order in one namespace, as a reader would paste them. A block
whose fence says ```python no-run, or that follows a `<!-- no-run -->` line, is skipped: that is
only for blocks that need a GPU, and such a block must say so (mention cuda).
"""
import os
import pathlib
import re
import warnings

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.M | re.S)


def python_blocks(text):
    """(line number, skipped, source) of each ```python block."""
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip().splitlines()[-1:] or [""]
        skipped = "no-run" in m.group(1) or before[0].strip() == "<!-- no-run -->"
        out.append((line, skipped, m.group(2)))
    return out


def test_the_docs_exist_and_have_runnable_blocks():
    names = {p.name for p in FILES}
    for name in ("semantics.md", "api.md", "presets_profiles.md", "splitk_tables.md",
                 "limitations.md", "evo2.md"):
        assert name in names, name
    assert sum(len(python_blocks(p.read_text())) for p in FILES) >= 10


def test_extractor_reads_fences_and_markers():
    text = ("x\n```python\na = 1\n```\n<!-- no-run -->\n```python\nb.cuda()\n```\n"
            "```python no-run\nc.cuda()\n```\n```bash\nls\n```\n")
    assert [(s, src) for _, s, src in python_blocks(text)] == [
        (False, "a = 1\n"), (True, "b.cuda()\n"), (True, "c.cuda()\n")]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, monkeypatch):
    blocks = python_blocks(path.read_text())
    monkeypatch.chdir(ROOT)
    saved_env = dict(os.environ)
    for var in ("MMAEMU_PROFILE", "MMAEMU_BACKEND", "MMAEMU_SPLITK", "MMAEMU_SPLITK_STRICT"):
        os.environ.pop(var, None)
    namespace = {"__name__": f"doc_{path.stem}"}
    try:
        for line, skipped, source in blocks:
            if skipped:
                assert "cuda" in source, f"{path.name}:{line}: only GPU blocks may be marked no-run"
                continue
            torch.manual_seed(0)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("default")
                    exec(compile(source, f"{path.name}:{line}", "exec"), namespace)
            except Exception as e:
                raise AssertionError(f"{path.name}, block at line {line} failed: "
                                     f"{type(e).__name__}: {e}") from e
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
