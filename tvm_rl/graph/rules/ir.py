"""A read-only view of `main`'s dataflow bindings, and an edit that rewrites a few of them.

Rules look at a module through `Graph` (bindings by name, their users, constant folding of weight chains)
and describe a rewrite as an `Edit` (new bindings placed before an anchor, replaced values, removed bindings).
`Edit.commit` rebuilds `main` with a Relax mutator, drops exactly the bindings the rewrite made dead, and
checks the result is well formed.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Iterator

import numpy as np
import tvm
from tvm import relax
from tvm.ir import Call, GenericConst, Op, Tuple, TupleGetItem, Var

from ...errors import TvmRlError
from .. import keepalive

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


class RuleError(TvmRlError, RuntimeError):
    """A rule was applied where it does not match, or produced an ill-formed module. A TvmRlError, so the
    command line reports it in one line; a RuntimeError still, as it was before."""


# ------------------------------------------------------------------------------------------ expressions


def op_name(expr) -> str | None:
    """"relax.nn.conv2d" for a call to that operator, None for anything else."""
    return _op_name(expr) if hasattr(expr, "__chandle__") else None


@keepalive.per_object()  # pricing a graph asks for every binding's, through TVM's FFI
def _op_name(expr) -> str | None:
    return expr.op.name if isinstance(expr, Call) and isinstance(expr.op, Op) else None


def var_refs(expr) -> Iterator[str]:
    """Names of the variables `expr` reads, once per occurrence (add(x, x) reads x twice)."""
    if isinstance(expr, Var):
        yield expr.name
    elif isinstance(expr, Call):
        for arg in expr.args:
            yield from var_refs(arg)
    elif isinstance(expr, Tuple):
        for field in expr.fields:
            yield from var_refs(field)
    elif isinstance(expr, TupleGetItem):
        yield from var_refs(expr.tuple_value)


@keepalive.per_object()
def value_refs(value) -> tuple[str, ...]:
    """`tuple(var_refs(value))`, remembered per binding value: a candidate graph shares almost all its bindings
    with its parent, and reading arguments through TVM's FFI was most of building its `Graph`."""
    return tuple(var_refs(value))


def static_shape(ty) -> tuple[int, ...] | None:
    """The shape of a tensor type when every dimension is a known integer, else None."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    shape = getattr(ty.shape, "values", None)
    if shape is None:
        return None
    dims = []
    for d in shape:
        if not isinstance(d, tvm.tirx.IntImm):
            return None
        dims.append(int(d))
    return tuple(dims)


def dtype_of(ty) -> str | None:
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


def float_tensor(expr) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of a float tensor with a static shape, else None: most rules need exactly that."""
    ty = getattr(expr, "ty", None)
    shape, dtype = static_shape(ty), dtype_of(ty)
    if shape is None or dtype not in FLOAT_DTYPES:
        return None
    return shape, dtype


def out_dtype(attrs) -> str | None:
    """An operator's `out_dtype` attribute, None when unset (the output keeps the input dtype)."""
    text = str(getattr(attrs, "out_dtype", "") or "")
    return None if text in ("", "None", "void") else text


def ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def ndim_of(expr) -> int | None:
    """The rank of `expr`'s tensor type when it is known, else None."""
    ty = getattr(expr, "ty", None)
    ndim = getattr(ty, "ndim", -1)
    return None if ndim is None or ndim < 0 else int(ndim)


def permute_axes(call: Call, ndim: int) -> tuple[int, ...]:
    """The axes of a permute_dims call on a rank-`ndim` tensor, non-negative; unset axes reverse them all."""
    axes = call.attrs.axes
    return tuple(range(ndim))[::-1] if axes is None else tuple(a % ndim for a in ints(axes))


def with_args(call: Call, args) -> Call:
    """`call` (same operator and attributes) on other arguments; its type is re-derived when bound."""
    return Call(call.op, list(args), call.attrs, call.ty_args)


def substitute(expr, mapping: dict):
    """`expr` with variables named in `mapping` replaced by the mapped expressions (calls, tuples, items)."""
    if isinstance(expr, Var):
        return mapping.get(expr.name, expr)
    if isinstance(expr, Call):
        return with_args(expr, [substitute(a, mapping) for a in expr.args])
    if isinstance(expr, Tuple):
        return Tuple([substitute(f, mapping) for f in expr.fields])
    if isinstance(expr, TupleGetItem):
        return TupleGetItem(substitute(expr.tuple_value, mapping), expr.index)
    return expr


def const(array: np.ndarray, dtype: str) -> GenericConst:
    """A Relax constant holding `array` cast to `dtype` (numbers computed in float64, stored as the model's)."""
    array = np.ascontiguousarray(np.asarray(array).astype(dtype))
    keepalive.created(array.nbytes)  # caches may keep it alive: they share one bound
    return relax.const(array, dtype)


_ARRAYS: OrderedDict = OrderedDict()  # constant handle -> (the constant, its read-only numpy copy)
_ARRAYS_LIMIT = 512
_ARRAYS_BYTES = [0]
_ARRAYS_MAX_BYTES = 2 << 30


def constant_array(c: GenericConst) -> np.ndarray | None:
    """A constant's value as a read-only numpy array, copied out of TVM once per constant object.

    Every search step builds a new Graph over modules that share most weights; copying each weight out again
    for every rule's check cost seconds per step on full-size models. The entry holds the constant, so its
    address cannot be reused while cached; read-only, so no rule can change a value another one reads."""
    value = c.value
    if not isinstance(value, tvm.runtime.Tensor):
        return None
    key = c.__chandle__()
    hit = _ARRAYS.get(key)
    if hit is not None and hit[0].same_as(c):
        _ARRAYS.move_to_end(key)
        return hit[1]
    array = value.numpy()
    array.flags.writeable = False
    _ARRAYS[key] = (c, array)
    _ARRAYS_BYTES[0] += array.nbytes
    # Bounded by count and by bytes: each entry keeps its weight alive twice (in TVM and as numpy).
    while len(_ARRAYS) > 1 and (len(_ARRAYS) > _ARRAYS_LIMIT or _ARRAYS_BYTES[0] > _ARRAYS_MAX_BYTES):
        _ARRAYS_BYTES[0] -= _ARRAYS.popitem(last=False)[1][1].nbytes
    return array


# -------------------------------------------------------------------------------------------------- graph


class Graph:
    """Bindings of the dataflow blocks of one Relax function, by variable name, with their users.

    Only bindings inside dataflow blocks are rewritable; reads from anywhere else (the function's result,
    ordinary binding blocks) count as external uses, which keep a binding alive.
    """

    def __init__(self, mod: tvm.IRModule, func_name: str = "main"):
        self.mod = mod
        self.gvar = mod.get_global_var(func_name)
        self.func = mod[func_name]
        if not isinstance(self.func, relax.Function):
            raise TypeError(f"{func_name} is not a Relax function")
        self.order: list[str] = []
        self.vars: dict[str, Var] = {}
        self.values: dict[str, object] = {}
        self.users: dict[str, list[str]] = {}
        self.external: Counter = Counter()
        names: set[str] = {p.name for p in self.func.params}
        body = self.func.body
        for block in body.blocks:
            dataflow = isinstance(block, relax.DataflowBlock)
            for binding in block.bindings:
                name = binding.var.name
                if name in names:
                    raise RuleError(f"variable name {name!r} is bound twice in {func_name}; rules need "
                                    "unique names")
                names.add(name)
                value = binding.value if isinstance(binding, relax.VarBinding) else None
                if dataflow and value is not None:
                    self.order.append(name)
                    self.vars[name] = binding.var
                    self.values[name] = value
                    for ref in value_refs(value):
                        self.users.setdefault(ref, []).append(name)
                else:
                    for ref in var_refs(value if value is not None else binding.value):
                        self.external[ref] += 1
        for ref in var_refs(body.body):
            self.external[ref] += 1
        self.names = names
        self.pos = {n: i for i, n in enumerate(self.order)}
        self._consts: dict[str, np.ndarray | None] = {}

    # ---- uses

    def n_uses(self, name: str) -> int:
        return len(self.users.get(name, ())) + self.external[name]

    def single_use(self, name: str) -> str | None:
        """The one dataflow binding reading `name`, if that is its only use (once), else None."""
        users = self.users.get(name, ())
        if len(users) == 1 and self.external[name] == 0:
            return users[0]
        return None

    # ---- producers

    def call(self, expr, *ops: str) -> Call | None:
        """The call bound to variable `expr` inside a dataflow block, if its operator is one of `ops`."""
        if not isinstance(expr, Var):
            return None
        value = self.values.get(expr.name)
        name = op_name(value)
        if name is not None and (not ops or name in ops):
            return value
        return None

    def calls(self, *ops: str) -> Iterator[tuple[str, Call]]:
        """(name, call) of every dataflow binding calling one of `ops`, in program order."""
        for name in self.order:
            value = self.values[name]
            if op_name(value) in ops:
                yield name, value

    def const(self, expr) -> np.ndarray | None:
        """The value of `expr` when it is a constant or a chain of reshape/permute_dims over one, else None."""
        if isinstance(expr, GenericConst):
            return constant_array(expr)
        if not isinstance(expr, Var) or expr.name not in self.values:
            return None
        if expr.name not in self._consts:
            self._consts[expr.name] = None  # guards against cycles while evaluating
            self._consts[expr.name] = self._eval(self.values[expr.name], expr)
        return self._consts[expr.name]

    def _eval(self, value, var: Var) -> np.ndarray | None:
        if isinstance(value, (GenericConst, Var)):
            return self.const(value)
        name = op_name(value)
        if name not in ("relax.permute_dims", "relax.reshape"):
            return None
        src = self.const(value.args[0])
        shape = static_shape(var.ty)
        if src is None or shape is None:
            return None
        if name == "relax.reshape":
            return src.reshape(shape)
        axes = value.attrs.axes
        return np.transpose(src, None if axes is None else ints(axes))

# ------------------------------------------------------------------------------------------ merge helpers


def channel_bias(g: Graph, name: str, channels: int, axis_from_end: int) -> tuple[str, np.ndarray] | None:
    """If binding `name` feeds only an `add` of a constant bias broadcast along one channel axis, return
    (that add's name, the bias as a flat vector). `axis_from_end` is the channel axis counted from the end."""
    user = g.single_use(name)
    add = g.values.get(user) if user else None
    if getattr(getattr(add, "op", None), "name", None) != "relax.add":
        return None
    if float_tensor(g.vars[user]) != float_tensor(g.vars[name]):
        return None  # the bias must not broadcast the result bigger
    sides = [a for a in add.args if not (isinstance(a, Var) and a.name == name)]
    if len(sides) != 1:
        return None
    bias = g.const(sides[0])
    if bias is None or bias.size != channels:
        return None
    # Only the channel axis may be non-1: the same bias for every position along the other axes.
    if bias.ndim >= axis_from_end and bias.shape[bias.ndim - axis_from_end] == channels:
        return user, bias.reshape(-1)
    return None


def split_outputs(edit: Edit, anchor: str, y, sizes: list[int], axis: int, targets: list[str], base: str
                  ) -> None:
    """Split `y` into `sizes` along `axis` and make each binding in `targets` read its part."""
    parts = edit.emit(anchor, relax.op.split(y, list(np.cumsum(sizes)[:-1].tolist()), axis=axis),
                      f"{base}_split")
    for i, target in enumerate(targets):
        edit.replace(target, edit.emit(anchor, TupleGetItem(parts, i), f"{base}_part{i}"))


# --------------------------------------------------------------------------------------------------- edit


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    """Re-emits the function's bindings, inserting, replacing and dropping the ones an Edit names."""

    def __init__(self, mod: tvm.IRModule, edit: Edit):
        super().__init__(mod)
        self.edit = edit

    def visit_var_binding_(self, binding):
        name = binding.var.name
        for var, expr in self.edit.before.get(name, ()):
            # The placeholder var itself is bound, so later references need no remapping.
            self.builder_.emit_normalized(relax.VarBinding(var, self.visit_expr(expr)))
        if name in self.edit.drop:
            if name in self.edit.alias:
                self.set_var_remap(binding.var, self.visit_expr(self.edit.alias[name]))
            return
        if name in self.edit.values:
            binding = relax.VarBinding(binding.var, self.edit.values[name])
        super().visit_var_binding_(binding)


class Edit:
    """A rewrite of one match: new bindings, replaced values and removed bindings of a Graph."""

    def __init__(self, graph: Graph):
        self.g = graph
        self.before: dict[str, list[tuple[Var, object]]] = {}
        self.values: dict[str, object] = {}
        self.alias: dict[str, Var] = {}
        self.drop: set[str] = set()
        self.names: set[str] = set()  # handed out by this edit; the Graph is shared, so it stays unchanged

    def fresh(self, base: str) -> str:
        """A variable name not used in the function (nor handed out before by this edit)."""
        name, i = base, 0
        while name in self.g.names or name in self.names:
            i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name

    def emit(self, anchor: str, expr, name: str) -> Var:
        """Bind `expr` to a new variable placed right before binding `anchor`; returns that variable.

        `expr` should read only variables defined before `anchor` (or emitted earlier) and constants.
        """
        ty = relax.BlockBuilder().normalize(expr).ty
        var = relax.DataflowVar(self.fresh(name), ty)
        self.before.setdefault(anchor, []).append((var, expr))
        return var

    def set_value(self, name: str, expr) -> None:
        """Bind `expr` instead to binding `name`'s variable (its type must stay the same)."""
        self.values[name] = expr

    def replace(self, name: str, new) -> None:
        """Make every reader of binding `name` read `new` instead, removing the binding when it can."""
        if isinstance(self.g.vars[name], relax.DataflowVar) and isinstance(new, Var):
            self.alias[name] = new
            self.drop.add(name)
        else:  # an output of the dataflow block must stay bound under its name; a constant stays bound
            self.values[name] = new

    def remove(self, name: str) -> None:
        self.drop.add(name)

    # ---- commit

    def _resolve(self, name: str) -> str:
        seen = set()
        while name in self.alias and name not in seen:
            seen.add(name)
            name = self.alias[name].name
        return name

    def _dead_closure(self) -> None:
        """Also drop the bindings this edit left unused (and only those: old dead code stays)."""
        g = self.g
        # Use counts after the edit, updated from the graph's counts: work in proportion to the edit, not
        # the graph (a full recount per candidate dominated enumeration on 600-binding models).
        live: Counter = Counter({name: len(users) for name, users in g.users.items()})
        live.update(g.external)
        for name in self.drop | set(self.values):
            live.subtract(var_refs(g.values[name]))
        for name, value in self.values.items():
            if name not in self.drop:
                live.update(var_refs(value))
        for pending in self.before.values():
            for _, expr in pending:
                live.update(var_refs(expr))
        for name in list(self.alias):
            final = self._resolve(name)
            if final != name:
                live[final] += live[name]
                live[name] = 0
        touched = [ref for name in (self.drop | set(self.values)) for ref in var_refs(g.values[name])]
        while touched:
            name = touched.pop()
            if name in g.values and name not in self.drop and live[name] == 0:
                self.drop.add(name)
                for ref in var_refs(self.values.get(name, g.values[name])):
                    live[self._resolve(ref)] -= 1
                    touched.append(ref)

    def commit(self, what: str = "rewrite", check: bool = True) -> tvm.IRModule:
        """The module with this edit applied; with `check`, a RuleError if the result is not well formed."""
        self._dead_closure()
        g = self.g
        func = _Rewriter(g.mod, self).visit_expr(g.func)
        funcs = {gv: (func if gv.same_as(g.gvar) else f) for gv, f in g.mod.functions.items()}
        out = tvm.IRModule(funcs, attrs=g.mod.attrs, global_infos=g.mod.global_infos)
        if check and not relax.analysis.check_well_formed(out):
            raise RuleError(f"{what} produced an ill-formed module")
        return out
