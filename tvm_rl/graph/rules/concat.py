"""Concat rules: cancel split/concat pairs, move element-wise activations into and out of a concat."""
from __future__ import annotations

import tvm_ffi
from tvm.ir import Tuple, TupleGetItem, Var

from .base import Match, Rule, register
from .ir import Edit, Graph, float_tensor, with_args

# Element-wise activations applied alike to every element: they commute with concat and split.
ACTIVATIONS = ("relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.sigmoid",
               "relax.tanh", "relax.clip", "relax.nn.leakyrelu", "relax.nn.softplus", "relax.nn.selu")
# Binary element-wise arithmetic, which the layout rules move with a constant operand re-laid-out.
ARITHMETIC = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def concat_fields(g: Graph, call) -> list | None:
    """The tensors a concat joins (its inline tuple or a tuple bound in the block), None if unknown."""
    arg = call.args[0]
    if isinstance(arg, Var):
        arg = g.values.get(arg.name)
    return list(arg.fields) if isinstance(arg, Tuple) else None


def concat_axis(call, ndim: int) -> int | None:
    axis = call.attrs.axis
    return None if axis is None else int(axis) % ndim


def _same_call(a, b) -> bool:
    """Same operator, attributes and extra (non-data) arguments: the same element-wise function."""
    if not a.op.same_as(b.op) or len(a.args) != len(b.args):
        return False
    if (a.attrs is None) != (b.attrs is None):
        return False
    if a.attrs is not None and not tvm_ffi.structural_equal(a.attrs, b.attrs):
        return False
    return all(tvm_ffi.structural_equal(x, y) for x, y in zip(a.args[1:], b.args[1:]))


@register
class SplitConcatCancel(Rule):
    """concat(split(x)[0], ..., split(x)[n-1]) along the split's axis -> x."""

    name = "split_concat_cancel"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.concat"):
            fields, result = concat_fields(g, call), g.vars[name].ty
            if not fields or getattr(result, "ndim", -1) is None or result.ndim < 0:
                continue
            items = [g.values.get(f.name) if isinstance(f, Var) else None for f in fields]
            if not all(isinstance(it, TupleGetItem) and isinstance(it.tuple_value, Var) for it in items):
                continue
            src = items[0].tuple_value
            split = g.call(src, "relax.split")
            if split is None or any(not it.tuple_value.same_as(src) for it in items):
                continue
            n_out = len(src.ty.fields)
            if [int(it.index) for it in items] != list(range(n_out)):
                continue
            if concat_axis(call, result.ndim) != int(split.attrs.axis) % result.ndim:
                continue
            out.append(self.match((src.name, name), f"{name} = concat of all parts of {src.name}"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        src, name = m.names
        edit.replace(name, g.values[src].args[0])


@register
class ActivationIntoConcat(Rule):
    """act(concat(a, b, ...)) -> concat(act(a), act(b), ...) for an element-wise activation."""

    name = "activation_into_concat"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls(*ACTIVATIONS):
            x = call.args[0]
            cat = g.call(x, "relax.concat")
            if cat is None or g.single_use(x.name) != name or float_tensor(g.vars[name]) is None:
                continue
            if concat_fields(g, cat) is None or cat.attrs.axis is None:
                continue
            out.append(self.match((x.name, name), f"{name} = {call.op.name.split('.')[-1]}({x.name}: concat)"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        cat_name, name = m.names
        act, cat = g.values[name], g.values[cat_name]
        parts = [edit.emit(name, with_args(act, [f, *act.args[1:]]), f"{name}_part")
                 for f in concat_fields(g, cat)]
        edit.set_value(name, with_args(cat, [Tuple(parts)]))


@register
class ActivationOutOfConcat(Rule):
    """concat(act(a), act(b), ...) -> act(concat(a, b, ...)) when every input is the same activation."""

    name = "activation_out_of_concat"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.concat"):
            fields = concat_fields(g, call)
            if not fields or len(fields) < 2 or call.attrs.axis is None or float_tensor(g.vars[name]) is None:
                continue
            acts = [g.call(f, *ACTIVATIONS) for f in fields]
            if any(a is None for a in acts) or not all(_same_call(acts[0], a) for a in acts[1:]):
                continue
            # Each activation must feed only this concat, or it would be computed twice.
            if any(g.single_use(f.name) != name for f in fields):
                continue
            if isinstance(call.args[0], Var) and g.single_use(call.args[0].name) != name:
                continue
            out.append(self.match((name,), f"{name} = concat of {acts[0].op.name.split('.')[-1]}s"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        call = g.values[name]
        acts = [g.values[f.name] for f in concat_fields(g, call)]
        joined = edit.emit(name, with_args(call, [Tuple([a.args[0] for a in acts])]), f"{name}_in")
        edit.set_value(name, with_args(acts[0], [joined, *acts[0].args[1:]]))

