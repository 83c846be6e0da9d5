"""Layout rules: compose permute_dims and reshape chains, drop shape no-ops, pre-compute constant layouts."""
from __future__ import annotations

from collections import OrderedDict

import tvm
from tvm import relax
from tvm.ir import GenericConst

from .. import keepalive
from .base import Match, Rule, register
from .ir import Edit, Graph, const, ndim_of, permute_axes, static_shape, substitute


@register
class PermuteCompose(Rule):
    """permute_dims(permute_dims(x, p1), p2) -> permute_dims(x, p1[p2]), or x when that is the identity."""

    name = "permute_compose"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.permute_dims"):
            inner = g.call(call.args[0], "relax.permute_dims")
            ndim = ndim_of(call.args[0])
            # The inner permute must die with the rewrite, or we only add work.
            if inner is None or ndim is None or g.single_use(call.args[0].name) != name:
                continue
            out.append(self.match((call.args[0].name, name), f"{call.args[0].name} -> {name}"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        inner_name, name = m.names
        outer, inner = g.values[name], g.values[inner_name]
        ndim = ndim_of(inner.args[0])
        p1, p2 = permute_axes(inner, ndim), permute_axes(outer, ndim)
        axes = [p1[k] for k in p2]
        if axes == list(range(ndim)):
            edit.replace(name, inner.args[0])
        else:
            edit.set_value(name, relax.op.permute_dims(inner.args[0], axes))


@register
class ReshapeCompose(Rule):
    """reshape(reshape(x, s1), s2) -> reshape(x, s2), or x when s2 is x's own shape."""

    name = "reshape_compose"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.reshape"):
            inner = g.call(call.args[0], "relax.reshape")
            if inner is None or g.single_use(call.args[0].name) != name:
                continue
            # Static shapes on both ends make the merged target unambiguous (no 0 / -1 to re-resolve).
            if static_shape(inner.args[0].ty) is None or static_shape(g.vars[name].ty) is None:
                continue
            out.append(self.match((call.args[0].name, name), f"{call.args[0].name} -> {name}"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        inner_name, name = m.names
        x = g.values[inner_name].args[0]
        shape = static_shape(g.vars[name].ty)
        if static_shape(x.ty) == shape:
            edit.replace(name, x)
        else:
            edit.set_value(name, relax.op.reshape(x, shape))


@register
class IdentityShapeOps(Rule):
    """reshape / broadcast_to to the input's own shape, and permute_dims by the identity, -> the input."""

    name = "identity_shape_op"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.reshape", "relax.broadcast_to", "relax.permute_dims"):
            x = call.args[0]
            if call.op.name == "relax.permute_dims":
                ndim = ndim_of(x)
                if ndim is None or permute_axes(call, ndim) != tuple(range(ndim)):
                    continue
            else:
                shape = static_shape(getattr(x, "ty", None))
                if shape is None or shape != static_shape(g.vars[name].ty):
                    continue
            if str(x.ty.dtype) != str(g.vars[name].ty.dtype):
                continue
            out.append(self.match((name,), f"{name} = {call.op.name.split('.')[-1]}(...) is a no-op"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        edit.replace(name, g.values[name].args[0])


# Call handle -> (the call, its folded constant), most recent last.
_FOLDED: OrderedDict = keepalive.cache(OrderedDict())
_FOLDED_LIMIT = 256


def _folded(g: Graph, name: str) -> GenericConst:
    """The constant `name`'s permute_dims/reshape computes, shared by every module that still has that call.

    A search folds the same weight in every candidate of every step (48 times a step on BERT): computing it once
    and sharing the constant saves the copies, and the candidates then share the folded weights in memory.
    The entry holds the call itself, so its address cannot be reused by another object while cached."""
    call = g.values[name]
    key = call.__chandle__()
    hit = _FOLDED.get(key)
    if hit is not None and hit[0].same_as(call):
        _FOLDED.move_to_end(key)
        return hit[1]
    value = const(g.const(g.vars[name]), str(g.vars[name].ty.dtype))
    _FOLDED[key] = (call, value)
    if len(_FOLDED) > _FOLDED_LIMIT:
        _FOLDED.popitem(last=False)
    return value


@register
class FoldConstTransform(Rule):
    """permute_dims / reshape of a constant (a transposed weight) -> the pre-transformed constant."""

    name = "fold_const_transform"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.permute_dims", "relax.reshape"):
            # Only directly over a constant: longer chains fold one step at a time. (What g.const would need
            # to fold it, checked without copying the weights out.)
            src = call.args[0]
            if (not isinstance(src, GenericConst) or not isinstance(src.value, tvm.runtime.Tensor)
                    or static_shape(g.vars[name].ty) is None):
                continue
            out.append(self.match((name,), f"{name} = {call.op.name.split('.')[-1]}(constant)"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        value = _folded(g, name)
        users = sorted(set(g.users.get(name, ())), key=g.pos.get)
        if g.external[name]:
            edit.set_value(name, value)  # read outside the dataflow block: keep the name, bind the constant
        for user in users:
            edit.set_value(user, substitute(g.values[user], {name: value}))

