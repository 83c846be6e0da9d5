"""Layout rules: compose permute_dims and reshape chains, drop shape no-ops, pre-compute constant layouts, and move
element-wise ops above a reshape into the kernel before it."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import tvm
from tvm import relax
from tvm.ir import GenericConst

from ...fast_math import FAST_ACTIVATIONS
from .. import keepalive
from .base import Match, Rule, register
from .concat import ARITHMETIC
from .ir import Edit, Graph, const, float_tensor, ndim_of, permute_axes, static_shape, substitute, with_args


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


def _trailing_constant(c: np.ndarray | None, before: tuple[int, ...] | None, after: tuple[int, ...]
                      ) -> np.ndarray | None:
    """`c` without its leading unit axes, when `op(reshape(x, after), c) == reshape(op(x, that), after)` for x of
    static shape `before`; else None.

    Row-major reshape keeps the flat index, and the last k axes of a shape are its low digits: when the k axes left
    in `c` are trailing axes of equal extent in `before` and `after`, every element meets the same value of `c` on
    both sides. Not so for, e.g., a per-channel constant on NHWC viewed as [N*H*W*C], nor for a constant of higher
    rank than either side (its axes would line up with different axes of the two)."""
    if c is None or before is None:
        return None
    nonunit = [i for i, d in enumerate(c.shape) if d != 1]
    core = c.reshape(c.shape[nonunit[0]:]) if nonunit else c.reshape(())
    k = core.ndim
    if k > min(len(before), len(after)) or before[len(before) - k:] != after[len(after) - k:]:
        return None
    return core


# The activations moved: piecewise linear, a compare and a select per element in a matmul's epilogue. Not GELU, SiLU,
# sigmoid, tanh or softplus: measured on tuned LLVM builds (docs/results/graph_ablation.md), a matmul with GELU in
# its epilogue ran about twice as slow as the matmul and a separate GELU kernel together (27.6 ms against 5.6 + 6.9
# ms), though the proxy priced the fusion as a saving.
_PIECEWISE_LINEAR = ("relax.nn.relu", "relax.clip", "relax.nn.leakyrelu")
# Built with fast math (`tvm_rl.fast_math`, what `tvm_rl.optimize` does on CPU) a transcendental costs about what a
# multiply-add does, and a GELU in a matmul's epilogue measured free: ConvNeXt's graph with its GELUs moved measured
# 1.21x over the original, both built with fast math (docs/results/graph_ablation.md). So with fast math these
# move too: the activations fast math builds fast.
_TRANSCENDENTAL = FAST_ACTIVATIONS


@register
class ReshapePastElementwise(Rule):
    """f(reshape(x, s)) -> reshape(f(x), s) for a piecewise-linear activation f (relu, clip, leaky relu), or a binary
    op with a constant that varies only along trailing axes the reshape keeps; so f joins the kernel that computes
    x (a matmul's epilogue, where a layer scale then folds into the weight), and the reshape meets the next one
    (reshape_compose).

    Not for GELU and the other transcendental activations, which measured slower inside a matmul's epilogue than in a
    kernel of their own, unless the build uses fast math (`for_fast_math`). The reshape must be read only by f (it
    must die with the rewrite); the result must be a float tensor of static shape, and with a constant operand x's
    shape must be static too."""

    name = "reshape_past_elementwise"

    def __init__(self, transcendental: bool = False):
        self.activations = _PIECEWISE_LINEAR + (_TRANSCENDENTAL if transcendental else ())

    def for_fast_math(self) -> Rule:
        return ReshapePastElementwise(transcendental=True)

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls(*self.activations, *ARITHMETIC):
            result = float_tensor(g.vars[name])
            if result is None:
                continue
            for side in (0,) if call.op.name in self.activations else (0, 1):
                u = call.args[side]
                shaped = g.call(u, "relax.reshape")
                if shaped is None or g.single_use(u.name) != name:
                    continue
                if call.op.name in ARITHMETIC and self._constant(g, call, side) is None:
                    continue
                out.append(self.match((u.name, name), f"{name} = {call.op.name.split('.')[-1]}(reshape "
                                      f"{u.name})", (side,)))
                break
        return out

    @staticmethod
    def _constant(g: Graph, call, side: int) -> np.ndarray | None:
        """The constant operand as it applies before the reshape at `call.args[side]`, None if there is none."""
        x = g.values[call.args[side].name].args[0]
        return _trailing_constant(g.const(call.args[1 - side]), static_shape(x.ty),
                                  static_shape(call.args[side].ty))

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (shaped_name, name), (side,) = m.names, m.params
        call = g.values[name]
        args = list(call.args)
        args[side] = g.values[shaped_name].args[0]
        if call.op.name in ARITHMETIC:
            args[1 - side] = const(self._constant(g, call, side), str(g.vars[name].ty.dtype))
        inner = edit.emit(name, with_args(call, args), f"{name}_pre")
        edit.set_value(name, relax.op.reshape(inner, static_shape(g.vars[name].ty)))
