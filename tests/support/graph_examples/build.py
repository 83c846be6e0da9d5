"""Building a small Relax module for a test: `module(body, shapes)` and random constants."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tvm
from tvm import relax

Body = Callable[..., object]
R = relax.op  # the graph builders' shorthand for Relax's operators


def module(body: Body, shapes: Sequence[Sequence[int]], dtype: str = "float32") -> tvm.IRModule:
    """A module whose `main(x0, x1, ...)` (inputs of `shapes`) is built by `body(emit, x0, x1, ...)`.

    `emit(expr)` binds `expr` in the dataflow block and returns the variable; `body` returns the result
    expression (a variable, or a tuple of them).
    """
    return module_of([relax.Var(f"x{i}", relax.TensorType(list(s), dtype)) for i, s in enumerate(shapes)], body)


def module_of(params: Sequence[relax.Var], body: Body) -> tvm.IRModule:
    """Like `module`, for inputs it cannot make (unknown rank, symbolic shapes): `main(params)` returns
    `body(emit, *params)`."""
    bb = relax.BlockBuilder()
    with bb.function("main", list(params)):
        with bb.dataflow():
            out = body(bb.emit, *params)
            if isinstance(out, (list, tuple)):
                out = relax.Tuple(list(out))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get()


def rand(rng: np.random.Generator, *shape: int, low: float | None = None, high: float | None = None,
         dtype: str = "float32") -> relax.Expr:
    """A constant of `shape`: standard normal, or uniform in [low, high)."""
    if low is None:
        data = rng.standard_normal(shape)
    elif high is None:
        raise ValueError("rand: `low` given without `high`")
    else:
        data = rng.uniform(low, high, size=shape)
    return relax.const(np.asarray(data).astype(dtype), dtype)
