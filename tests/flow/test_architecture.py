"""The layering docs/architecture.md promises, checked on the source: data flows one way, the two halves stay
apart (graph/ never imports tune/ nor the other way round), the modules below both import neither, no module
imports itself back through others, and the package never imports the lab beside it (benchmarks/, tests/)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tvm_rl

PACKAGE = Path(tvm_rl.__file__).resolve().parent

# Each layer may import only from the layers named for it (beside itself and third-party packages).
LAYERS = {
    "base": {"errors", "paths", "threads", "interrupt", "measure", "database", "fast_math"},
    "models": {"models"},
    "rl": {"rl"},
    "graph": {"graph"},
    "tune": {"tune"},
    "top": {"flow", "flow_command", "report", "cli", "demo", "dynamo", "__init__"},
}
ALLOWED = {
    "base": {"base"},
    "models": {"base", "models"},
    "rl": {"base", "rl"},
    "graph": {"base", "models", "rl", "graph"},
    "tune": {"base", "models", "rl", "tune"},
    "top": {"base", "models", "rl", "graph", "tune", "top"},
}


def layer_of(module: str) -> str:
    head = module.split(".")[1] if module.count(".") else "__init__"
    for layer, heads in LAYERS.items():
        if head in heads:
            return layer
    raise AssertionError(f"tvm_rl.{head} belongs to no layer: add it to LAYERS and to docs/architecture.md")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, prefix: str = "tvm_rl") -> set[str]:
    """Every module `path` imports whose name starts with `prefix` ("" for all), at the top or inside a function,
    absolute or relative."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith(prefix)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(prefix):
                # `from . import x` names submodules: count each as imported.
                subs = [f"{target}.{a.name}" for a in node.names] if not node.module else []
                out |= set(subs) if subs else {target}
                # `from package import module`: the submodule, so that the module graph is exact.
                out |= {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES}
    return out


SOURCES = sorted(PACKAGE.rglob("*.py"))
MODULES = {module_name(p) for p in SOURCES}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layers(path):
    mine = layer_of(module_name(path))
    for target in imports_of(path):
        if target == "tvm_rl":
            continue
        theirs = layer_of(target)
        assert theirs in ALLOWED[mine], f"{module_name(path)} ({mine}) imports {target} ({theirs})"


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_graph_and_tune_never_import_each_other():
    for path in SOURCES:
        name = module_name(path)
        for target in imports_of(path):
            for mine, theirs in (("tvm_rl.graph", "tvm_rl.tune"), ("tvm_rl.tune", "tvm_rl.graph")):
                assert not (inside(name, mine) and inside(target, theirs)), f"{name} imports {target}"


def test_the_package_never_imports_the_lab():
    for path in SOURCES:
        lab = {t for t in imports_of(path, prefix="") if t.split(".")[0] in ("benchmarks", "tests")}
        assert not lab, f"{module_name(path)} imports {sorted(lab)}: the package may not use the lab beside it"


def import_graph() -> dict[str, set[str]]:
    """tvm_rl's modules and the tvm_rl modules each imports (an import of a name inside a package counts as one of
    the package, which runs its `__init__`)."""
    return {module_name(p): {t for t in imports_of(p) if t in MODULES} - {module_name(p)} for p in SOURCES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles_inside_the_package():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_circle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": set()}
    assert circles(graph) == [["a", "b", "c"]]


def test_the_import_checker_sees_relative_and_function_level_imports():
    path = PACKAGE / "graph" / "command.py"
    assert "tvm_rl.database" in imports_of(path)  # imported inside main()
    assert "tvm_rl.measure" in imports_of(path)   # `from .. import measure`
    assert not inside("tvm_rl.tunes", "tvm_rl.tune") and inside("tvm_rl.tune.knobs", "tvm_rl.tune")
