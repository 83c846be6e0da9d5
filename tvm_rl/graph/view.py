"""The graph view of a Relax module shared by the encoder, the candidates and the cost model, and the
per-object memos that make pricing dozens of candidate graphs a step affordable."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from . import keepalive
from .rules.ir import Graph, static_shape


def _nbytes(ty) -> int:
    """Bytes of a tensor type (or the sum over a tuple type's fields); 0 when the shape is not static."""
    if isinstance(ty, relax.TupleType):
        return sum(_nbytes(t) for t in ty.fields)
    shape = static_shape(ty)
    if shape is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * tvm.DataType(str(ty.dtype)).itemsize


# Reading shapes through TVM's FFI dominates the cost of scoring a graph, and the candidates of one step share
# almost all their Var and Call objects with the current graph, so per-object results are memoised. TVM
# Keys are looked up by object address (TVM's `==` on expressions is slow: it first asks whether they are
# PrimExprs); each entry keeps its key's objects alive, so an address is never reused while cached.
_MEMO: dict = keepalive.cache({})
MEMO_LIMIT = 8192  # entries hold bindings and their constants: keep a few steps' worth


_IS_OBJECT: dict[type, bool] = {}  # isinstance against tvm_ffi.Object goes through abc: slow at 10^5 calls a step


def _ident(x):
    t = type(x)
    is_object = _IS_OBJECT.get(t)
    if is_object is None:
        is_object = _IS_OBJECT[t] = isinstance(x, tvm_ffi.Object)
    return ("@", x.__chandle__()) if is_object else x


def memo(key: tuple, compute):
    """`compute()` cached under `key` (a tuple of TVM objects and plain values) for this process."""
    ident = tuple(map(_ident, key))
    hit = _MEMO.get(ident)
    if hit is None:
        if len(_MEMO) > MEMO_LIMIT:
            _MEMO.clear()
        hit = _MEMO[ident] = (key, compute())
    return hit[1]


_GRAPHS: OrderedDict = keepalive.cache(OrderedDict())


def graph_of(mod: tvm.IRModule) -> Graph:
    """`Graph(mod)`, shared by the encoder and the cost model for the last 128 modules seen."""
    key = mod.__chandle__()
    hit = _GRAPHS.get(key)
    if hit is not None and hit.mod.same_as(mod):
        _GRAPHS.move_to_end(key)
        return hit
    g = _GRAPHS[key] = Graph(mod)
    if len(_GRAPHS) > 128:
        _GRAPHS.popitem(last=False)
    return g


@keepalive.per_object(MEMO_LIMIT)
def tensor_info(expr) -> tuple[tuple[int, ...] | None, int]:
    """(static shape or None, bytes) of a Var's or constant's type, memoised per object (called for every
    tensor of every candidate graph priced: `memo`'s generic key was a third of pricing)."""
    return static_shape(expr.ty), _nbytes(expr.ty)

