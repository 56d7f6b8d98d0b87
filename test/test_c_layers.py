"""The C core's translation units depend on each other one way.

Every csrc/{core,cpu,cuda}/*.c is compiled to an object with the exact flags; `nm` gives the
symbols each defines and uses, and "TU A uses a symbol TU B defines" is an edge A -> B. The graph
must have no cycle (a pair of files calling each other is one concern cut in two, or two tied
together), and its edges must go down the layers: core/ uses only core/, cpu/ and cuda/ use
themselves and core/, so the CPU executor never reaches the CUDA loader. The arithmetic headers
of csrc/kernels include nothing outside csrc/kernels (NVRTC compiles them alone).
"""
import collections
import concurrent.futures
import os
import re
import shutil
import subprocess

import pytest

import cbuild

# The layers each layer's translation units may use.
ALLOWED = {"core": {"core"}, "cpu": {"core", "cpu"}, "cuda": {"core", "cuda"}}

pytestmark = pytest.mark.skipif(not (cbuild.c_compiler() and shutil.which("nm")),
                                reason="needs a C compiler and nm")


def compile_objects(sources, outdir, flags):
    """{source: object file}, each source compiled alone with flags."""
    cc = cbuild.c_compiler()

    def one(src):
        obj = os.path.join(outdir, os.path.relpath(src, cbuild.ROOT).replace(os.sep, "__") + ".o")
        r = subprocess.run([cc, *flags, "-c", src, "-o", obj], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{src}:\n{r.stderr}"
        return src, obj

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return dict(pool.map(one, sources))


def symbols(obj):
    """(defined, used): the external symbols an object file defines and the ones it needs."""
    out = subprocess.run(["nm", "-g", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] in ("U", "w", "v") and len(parts) == 2:
            used.add(parts[-1])
        elif len(parts) == 3:
            defined.add(parts[2])
    return defined, used


def tu_graph(objects):
    """{source: set of sources whose symbols it uses} (symbols no source defines, libc's, are
    left out); fails on a symbol defined twice."""
    table = {src: symbols(obj) for src, obj in objects.items()}
    owner = {}
    for src, (defined, _) in table.items():
        for name in defined:
            assert name not in owner, f"{name} is defined in {owner.get(name)} and {src}"
            owner[name] = src
    return {src: {owner[n] for n in used if n in owner and owner[n] != src}
            for src, (_, used) in table.items()}


def find_cycle(graph):
    """A list of nodes that form a cycle (the first repeated at the end), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def layer_of(src):
    return os.path.relpath(src, cbuild.CSRC).split(os.sep)[0]


def layer_violations(graph, layer=layer_of):
    """The edges that go up or across the layers (ALLOWED)."""
    return sorted((os.path.relpath(a, cbuild.ROOT), os.path.relpath(b, cbuild.ROOT))
                  for a, uses in graph.items() for b in uses if layer(b) not in ALLOWED[layer(a)])


def named(cycle):
    return " -> ".join(os.path.relpath(p, cbuild.ROOT) for p in cycle)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    flags = [*cbuild.exact_flags("c"), "-O2", *cbuild.include_flags()]
    return tu_graph(compile_objects(cbuild.core_sources(), str(tmp_path_factory.mktemp("objects")), flags))


def test_every_layer_has_translation_units(graph):
    assert {layer_of(src) for src in graph} == set(cbuild.LAYERS)
    assert sum(len(uses) for uses in graph.values()) > 20  # the graph is really there


def test_no_translation_unit_depends_on_itself_through_others(graph):
    cycle = find_cycle(graph)
    assert cycle is None, f"a cycle of calls between translation units: {named(cycle)}"


def test_layers_are_used_only_downward(graph):
    assert layer_violations(graph) == []


def test_the_check_finds_a_cycle_and_a_layer_violation(tmp_path):
    """Two translation units that call each other make a cycle the check reports; a core file
    that calls into cuda/ is reported as going up the layers."""
    a, b = tmp_path / "a.c", tmp_path / "b.c"
    a.write_text("int b_half(int x);\nint a_half(int x) { return x > 0 ? b_half(x - 1) : 0; }\n")
    b.write_text("int a_half(int x);\nint b_half(int x) { return x > 0 ? a_half(x - 1) + 1 : 1; }\n")
    g = tu_graph(compile_objects([str(a), str(b)], str(tmp_path), [*cbuild.exact_flags("c"), "-O2"]))
    assert g == {str(a): {str(b)}, str(b): {str(a)}}
    assert find_cycle(g) in ([str(a), str(b), str(a)], [str(b), str(a), str(b)])
    assert find_cycle({str(a): {str(b)}, str(b): set()}) is None
    layers = {str(a): "core", str(b): "cuda"}
    assert layer_violations(g, layers.get) == [(os.path.relpath(str(a), cbuild.ROOT),
                                                os.path.relpath(str(b), cbuild.ROOT))]


INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def test_kernel_headers_include_only_kernel_headers():
    """csrc/kernels is self-contained: NVRTC compiles it without the rest of csrc."""
    found = collections.defaultdict(list)
    for name in sorted(os.listdir(cbuild.KERNELS)):
        text = open(os.path.join(cbuild.KERNELS, name), errors="replace").read()
        for inc in INCLUDE.findall(text):
            if not os.path.isfile(os.path.join(cbuild.KERNELS, inc)):
                found[name].append(inc)
    assert not found, dict(found)
    assert INCLUDE.findall('#include "../cpu/cpu.h"\n') == ["../cpu/cpu.h"]  # the pattern sees includes
