"""Fast structural keys for Relax graphs whose constants are large (model weights).

`tvm_ffi.structural_hash` hashes every byte of every constant: 0.25 s per call on a full-size BERT, paid for
every candidate graph, every memoised cost and every encoded observation. Here a graph's key is built from its
bindings (operator, attributes, which earlier binding or parameter each argument is, by position, not by
name), and a constant contributes a hash of its contents computed once per constant object: rewrites share
the unchanged weights, so a new graph costs only its new constants. Keys are equal for structurally equal
graphs; callers that must be exact confirm a key hit with `tvm_ffi.structural_equal` (cheap when the
constants are the same objects). Keys use Python's `hash` and are only meaningful inside one process.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.ir import Call, GenericConst, Op, Tuple, TupleGetItem, Var

from . import keepalive

# Caches keyed by the TVM object's address, each entry holding the object so the address stays unique. (Keyed
# by the object itself, every lookup through a new Python wrapper of the same node calls TVM's slow `==`.)
# Entries hold objects that hold weights, so the caches are bounded: a search on a full-size model makes a new
# folded weight for most candidates, and caches sized by entry count alone kept gigabytes of them alive.
_CONST_HASHES: dict[int, tuple[GenericConst, int]] = {}
_CONST_BYTES = [0]
_MAX_CONST_BYTES = 1 << 30
_MAX_TEMPLATES = 4096


def _const_nbytes(const: GenericConst) -> int:
    value = const.value
    shape = getattr(value, "shape", None)
    if shape is None:
        return 0
    return int(np.prod([int(d) for d in shape], dtype=np.int64)) * tvm.DataType(str(value.dtype)).itemsize


def const_key(const: GenericConst) -> int:
    """A hash of the constant's type and contents, computed once per constant object."""
    hit = _CONST_HASHES.get(const.__chandle__())
    if hit is None:
        nbytes = _const_nbytes(const)
        if _CONST_BYTES[0] + nbytes > _MAX_CONST_BYTES:  # recomputing is only slower
            _CONST_HASHES.clear()
            _CONST_BYTES[0] = 0
        hit = _CONST_HASHES[const.__chandle__()] = (const, tvm_ffi.structural_hash(const))
        _CONST_BYTES[0] += nbytes
    return hit[1]


def expr_key(expr, positions: dict[str, int]):
    """A hashable key of `expr`; variables are named by `positions` (parameter or binding index)."""
    if isinstance(expr, Var):
        return ("v", positions.get(expr.name, expr.name))
    if isinstance(expr, GenericConst):
        return ("c", const_key(expr))
    if isinstance(expr, Call):
        op = expr.op.name if isinstance(expr.op, Op) else expr_key(expr.op, positions)
        attrs = tvm_ffi.structural_hash(expr.attrs) if expr.attrs is not None else 0
        sinfo = tuple(tvm_ffi.structural_hash(s) for s in expr.ty_args) if expr.ty_args else ()
        return ("call", op, attrs, sinfo, tuple(expr_key(a, positions) for a in expr.args))
    if isinstance(expr, Tuple):
        return ("tuple", tuple(expr_key(f, positions) for f in expr.fields))
    if isinstance(expr, TupleGetItem):
        return ("item", expr.index, expr_key(expr.tuple_value, positions))
    return ("other", tvm_ffi.structural_hash(expr))  # shapes, prim values, strings: small


_TEMPLATES: dict[int, tuple[object, tuple[int, tuple[str, ...]]]] = keepalive.cache({})


def _template(value) -> tuple[int, tuple[str, ...]]:
    """(hash of `value` with its variables as placeholders, the variables' names in order), cached per value
    object: a candidate graph shares all but a few binding values with its parent."""
    hit = _TEMPLATES.get(value.__chandle__())
    if hit is None:
        names: list[str] = []
        placeholders: dict[str, int] = {}

        class _Positions(dict):
            def get(self, name, default=None):  # every variable becomes "the i-th one read"
                if name not in placeholders:
                    placeholders[name] = len(placeholders)
                    names.append(name)
                return placeholders[name]

        if len(_TEMPLATES) >= _MAX_TEMPLATES:
            _TEMPLATES.clear()
        hit = _TEMPLATES[value.__chandle__()] = (value, (hash(expr_key(value, _Positions())), tuple(names)))
    return hit[1]


def _function_key(func: relax.Function) -> int:
    positions: dict[str, int] = {}
    parts: list = []
    for p in func.params:
        positions[p.name] = len(positions)
        parts.append(("param", tvm_ffi.structural_hash(p.ty)))
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return hash((tuple(parts), expr_key(body, positions)))
    for block in body.blocks:
        parts.append(("block", isinstance(block, relax.DataflowBlock)))
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding):
                shape, names = _template(binding.value)
                parts.append((isinstance(binding.var, relax.DataflowVar), shape,
                              tuple(positions.get(n, n) for n in names)))
            else:  # match_cast: its struct info is part of the meaning
                parts.append(("cast", expr_key(binding.value, positions), tvm_ffi.structural_hash(binding.ty)))
            positions[binding.var.name] = len(positions)
    parts.append(("result", expr_key(body.body, positions)))
    return hash(tuple(parts))


# The last 128 modules keyed.
_MODULE_KEYS: OrderedDict[int, tuple[tvm.IRModule, int]] = keepalive.cache(OrderedDict())


def module_key(mod: tvm.IRModule) -> int:
    """A key of the whole module: Relax functions by their bindings, anything else by structural hash.

    Remembered for the last 128 modules (two steps' candidates; each module may hold large folded weights):
    candidate enumeration keys each new graph to deduplicate it, and the memoised cost functions key it again.
    Modules are taken as immutable, as TVM's passes and our rewrites treat them (each returns a new module); one
    changed in place after keying keeps its old key."""
    hit = _MODULE_KEYS.get(mod.__chandle__())
    if hit is not None:
        _MODULE_KEYS.move_to_end(mod.__chandle__())
        return hit[1]
    key = _compute_module_key(mod)
    _MODULE_KEYS[mod.__chandle__()] = (mod, key)
    if len(_MODULE_KEYS) > 128:
        _MODULE_KEYS.popitem(last=False)
    return key


def _compute_module_key(mod: tvm.IRModule) -> int:
    parts = []
    for gvar, func in sorted(mod.functions.items(), key=lambda kv: kv[0].name_hint):
        if isinstance(func, relax.Function):
            parts.append((gvar.name_hint, _function_key(func)))
        else:
            parts.append((gvar.name_hint, tvm_ffi.structural_hash(func)))
    return hash(tuple(parts))


def same_graph(a: tvm.IRModule, b: tvm.IRModule) -> bool:
    """Exact structural equality (use after a key hit)."""
    return a is b or a.same_as(b) or tvm_ffi.structural_equal(a, b)
