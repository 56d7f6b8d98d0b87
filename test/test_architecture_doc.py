"""docs/architecture.md names only files that exist: every backticked path in it (a word with a
slash and a file extension, or a directory ending in a slash) is checked in the repository."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "architecture.md")
PATH = re.compile(r"`([A-Za-z0-9_./-]+/[A-Za-z0-9_.-]*)`")


def named_paths(text):
    """The backticked tokens that look like repository paths: they contain a slash and end in a
    file extension or a slash."""
    return sorted({p for p in PATH.findall(text) if p.endswith("/") or re.search(r"\.[a-z]+$", p)})


def test_every_path_the_architecture_names_exists():
    paths = named_paths(open(DOC).read())
    assert len(paths) >= 10, paths            # the doc walks the call path module by module
    missing = [p for p in paths if not os.path.exists(os.path.join(ROOT, p))]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_path_check_finds_a_missing_file():
    text = "`mmaemu/api.py` calls `mmaemu/no_such_module.py`; `csrc/kernels/` and `not a path`"
    paths = named_paths(text)
    assert paths == ["csrc/kernels/", "mmaemu/api.py", "mmaemu/no_such_module.py"]
    assert not os.path.exists(os.path.join(ROOT, "mmaemu/no_such_module.py"))
