"""The Python package's layers: no import cycle, and each layer imports only what lies below it.

Every import of every module of mmaemu/ counts, also one inside a function (ast, not runtime),
so a cycle closed by a late import is found too. docs/architecture.md describes the layers; the
C translation units have their own check (test/test_c_layers.py).
"""
import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "mmaemu"


def _module_name(path):
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path):
    """The mmaemu modules a module imports (resolved, at any nesting)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mmaemu")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("mmaemu"):
                continue
            for alias in node.names:   # `from pkg import module` names a module
                full = f"{target}.{alias.name}"
                if full == "mmaemu._C":   # the C extension: a leaf, not a Python file
                    continue
                found.add(full if full in MODULES else target)
    return {m for m in found if m in MODULES and m != name}


MODULES = {_module_name(p): p for p in PKG.rglob("*.py") if "kernels" not in p.parts}
GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def cycles(graph):
    """Every import cycle, each as a list of modules (Tarjan's strongly connected components)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle():
    assert len(GRAPH) > 30
    assert cycles(GRAPH) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]


def _layer(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else "top"


# What each module may import: planning reads facts and never runs a kernel; the registry and
# the environment are leaves.
RULES = {
    "mmaemu.runtime.config": set(),
    "mmaemu.runtime.registry": set(),   # and the C extension
    "mmaemu.formats": set(),
    "mmaemu.errors": set(),
}
NEVER_FROM_PLANNING = {"mmaemu.runtime.selftest", "mmaemu.runtime.warmup",
                       "mmaemu.runtime.diagnostics", "mmaemu.api", "mmaemu.ops"}


@pytest.mark.parametrize("module", sorted(RULES))
def test_leaves_import_only_what_they_may(module):
    assert GRAPH[module] <= RULES[module], GRAPH[module]


def test_planning_reads_facts_and_runs_nothing():
    for module, imported in GRAPH.items():
        if _layer(module) == "planning":
            assert not (imported & NEVER_FROM_PLANNING), (module, imported & NEVER_FROM_PLANNING)
            assert not any(_layer(m) == "integrations" for m in imported), module


def test_runtime_and_planning_never_import_the_integrations_or_the_api():
    for module, imported in GRAPH.items():
        if _layer(module) in ("planning", "runtime"):
            bad = {m for m in imported if _layer(m) == "integrations" or m == "mmaemu.api"}
            assert not bad, (module, bad)
