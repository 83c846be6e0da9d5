"""Every block of a PrimFunc: the walk that reading a workload's blocks needs (TVM's Python side has no visitor
for s_tir blocks)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def blocks(func: Any) -> Iterator[Any]:
    """Every SBlock of a PrimFunc, outermost first (a block's init and body are searched too)."""
    from tvm.s_tir import SBlock

    todo: list[Any] = [func.body]
    while todo:
        node = todo.pop()
        if node is None:
            continue
        if isinstance(node, SBlock):
            yield node
            todo += [node.body, node.init]
            continue
        for attr in ("body", "block", "then_case", "else_case"):
            todo.append(getattr(node, attr, None))
        todo += list(getattr(node, "seq", []))


def main_func(mod: Any) -> Any:
    """A workload's PrimFunc: its only function, else the one named "main"."""
    return next(iter(mod.functions.values())) if len(mod.functions) == 1 else mod["main"]
