"""The layering docs/architecture.md promises, checked on the source: data flows one way, the two halves stay
apart (graph/ never imports tune/ nor the other way round), and the modules below both import neither."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tvm_rl

PACKAGE = Path(tvm_rl.__file__).resolve().parent

# Each layer may import only from the layers named for it (beside itself and third-party packages).
LAYERS = {
    "base": {"errors", "paths", "interrupt", "measure", "database", "jsonl_gz", "fast_math"},
    "models": {"models"},
    "rl": {"rl"},
    "graph": {"graph"},
    "tune": {"tune"},
    "top": {"flow", "flow_command", "tuned_cost", "bench", "tuner_e2e", "tuner_e2e_table", "tuner_e2e_archive",
            "fast_math_bench", "report", "cli", "demo", "dynamo", "__init__"},
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


def imports_of(path: Path) -> set[str]:
    """Every tvm_rl module `path` imports, at the top or inside a function, absolute or relative."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("tvm_rl")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("tvm_rl"):
                # `from . import x` names submodules: count each as imported.
                subs = [f"{target}.{a.name}" for a in node.names] if not node.module else []
                out |= set(subs) if subs else {target}
    return out


SOURCES = sorted(PACKAGE.rglob("*.py"))


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


def test_the_import_checker_sees_relative_and_function_level_imports():
    path = PACKAGE / "graph" / "command.py"
    assert "tvm_rl.database" in imports_of(path)  # imported inside main()
    assert "tvm_rl.measure" in imports_of(path)   # `from .. import measure`
    assert not inside("tvm_rl.tuned_cost", "tvm_rl.tune") and inside("tvm_rl.tune.knobs", "tvm_rl.tune")
