"""Algebraic clean-ups: x*1, x+0 (and kin) removal, and duplicate-computation removal."""
from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm.ir import Call, Tuple, TupleGetItem, Var

from ..fingerprint import expr_key
from .base import Match, Rule, register
from .ir import Edit, Graph, float_tensor

# op -> (neutral element, positions of x allowed): x - 0 and x / 1 only with x on the left.
_NEUTRAL = {
    "relax.add": (0.0, (0, 1)),
    "relax.subtract": (0.0, (0,)),
    "relax.multiply": (1.0, (0, 1)),
    "relax.divide": (1.0, (0,)),
}


@register
class IdentityArith(Rule):
    """x * 1, 1 * x, x + 0, 0 + x, x - 0, x / 1 -> x, when the constant does not broadcast x's shape."""

    name = "identity_arith"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls(*_NEUTRAL):
            neutral, sides = _NEUTRAL[call.op.name]
            result = float_tensor(g.vars[name])
            for side in sides:
                x, c = call.args[side], call.args[1 - side]
                value = g.const(c)
                # Output shape and dtype must be x's own: a neutral constant can still broadcast x bigger.
                if value is None or result is None or float_tensor(x) != result:
                    continue
                if value.size and np.all(value == neutral):
                    out.append(self.match((name,), f"{name} = {call.op.name[6:]}(x, {neutral:g}) -> x", (side,)))
                    break
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,), (side,) = m.names, m.params
        edit.replace(name, g.values[name].args[side])


@register
class DedupOps(Rule):
    """Two bindings computing the same pure expression on the same arguments -> the later reads the first."""

    name = "dedup"

    def find(self, g: Graph) -> list[Match]:
        first: dict[object, list[str]] = {}
        out = []
        for name in g.order:
            value = g.values[name]
            # Dataflow blocks hold only pure computations, so equal expressions give equal values.
            if not isinstance(value, (Call, Tuple, TupleGetItem)):
                continue
            key = expr_key(value, {})  # by name: both bindings are in this one function
            for earlier in first.get(key, ()):
                if tvm_ffi.structural_equal(g.values[earlier], value):
                    out.append(self.match((earlier, name), f"{name} recomputes {earlier}"))
                    break
            else:
                first.setdefault(key, []).append(name)
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        earlier, name = m.names
        edit.replace(name, g.vars[earlier])


@register
class FoldTupleGetItem(Rule):
    """(a, b, ...)[i] -> the i-th field, for a tuple built in the block (e.g. max_pool2d's exported
    (output, zeros_like(output)) pair): the tuple and its unread fields then go away."""

    name = "fold_tuple_get_item"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name in g.order:
            item = g.values[name]
            if not isinstance(item, TupleGetItem):
                continue
            tup = item.tuple_value
            if isinstance(tup, Var):
                tup = g.values.get(tup.name)
            # Only a literal tuple: an operator's tuple result (split, batch_norm) has no field to read.
            if isinstance(tup, Tuple) and 0 <= int(item.index) < len(tup.fields):
                out.append(self.match((name,), f"{name} = tuple[{int(item.index)}] -> the field"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        item = g.values[name]
        tup = item.tuple_value
        if isinstance(tup, Var):
            tup = g.values[tup.name]
        edit.replace(name, tup.fields[int(item.index)])
