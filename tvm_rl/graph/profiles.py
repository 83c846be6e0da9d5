"""Kernel and operator profiles: FLOPs, bytes and kind of every kernel a module runs.

`kernel_profiles` reads them off the lowered TIR (TVM's own fusion; ~0.5 s a tiny model); `op_profiles` and
`fused_groups` predict them from the Relax bindings (TVM's FoldConstant and FuseOps replayed by `fusion`;
milliseconds, what the environment prices dozens of candidates with per step). `graph_roofline_ms` and
`kernel_roofline_ms` price them with a roofline (`roofline`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Call, GenericConst, Tuple, TupleGetItem, Var

from .. import measure
from ..database import DatabaseLike
from . import fusion, keepalive
from .gemm_cost import GemmShape, gemm_shape
from .roofline import FAMILY, Roofline, call_kind, default_hardware, op_kind, tir_kind
from .rules.ir import Graph, op_name, static_shape
from .view import MEMO_LIMIT, graph_of, tensor_info


@dataclass(frozen=True)
class KernelProfile:
    """One lowered kernel: name, structural hash of its (scheduled) PrimFunc, call count, FLOPs, bytes, and
    its kind (`op_kind` of its TIR blocks' names: a kernel's name does not say its layout)."""

    name: str
    structural_hash: int
    calls: int
    flops: float
    nbytes: int
    kind: str = "elementwise"


def _kernel_kind(name: str, func: tirx.PrimFunc) -> str:
    """A lowered kernel's kind; printing its TIR (milliseconds) only for a conv, whose name hides its layout."""
    kind = op_kind(name)
    return tir_kind(func) if kind in ("conv", *FAMILY) else kind


def prim_func_bytes(func: tirx.PrimFunc) -> int:
    """Bytes of the buffers a kernel reads and writes: a fused kernel's minimum DRAM traffic."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return sum(int(np.prod([int(d) for d in info.shape], dtype=np.int64)) * tvm.DataType(str(info.dtype)).itemsize
               for info in ArgInfo.from_prim_func(func))


def arg_shapes(func: tirx.PrimFunc) -> tuple[tuple[int, ...], ...]:
    """The shapes of a kernel's buffer arguments, in argument order (inputs, then outputs)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return tuple(tuple(int(d) for d in info.shape) for info in ArgInfo.from_prim_func(func))


def kernel_profiles(mod: tvm.IRModule, target: tvm.target.Target | str,
                    database: DatabaseLike = None) -> list[KernelProfile]:
    """FLOPs (TVM's TIR estimate) and bytes of every kernel `mod` lowers to, with how often it is called."""
    return profiles_of(measure.kernel_stage(mod, measure.parse_target(target), database))


def kernel_roofline_ms(mod: tvm.IRModule, target: tvm.target.Target | str, hardware: Roofline | None = None,
                       database: DatabaseLike = None) -> float:
    """Roofline latency of `mod`'s lowered kernels: sum of calls x hardware.time_ms(FLOPs, bytes)."""
    hardware = hardware or default_hardware(target)
    return sum(k.calls * hardware.time_ms(k.flops, k.nbytes, k.kind)
               for k in kernel_profiles(mod, target, database))


# -------------------------------------------------------------------------------- Relax-level profiles

# FLOPs per output element of the normalisations and softmax (exp, sums, divides; a stated round number).
_PER_ELEMENT = {"relax.nn.softmax": 5, "relax.nn.log_softmax": 5, "relax.nn.layer_norm": 8,
                "relax.nn.batch_norm": 4, "relax.nn.group_norm": 8, "relax.nn.rms_norm": 6,
                "relax.nn.gelu": 8, "relax.nn.silu": 4, "relax.sigmoid": 4}


@dataclass(frozen=True)
class OpProfile:
    """One binding of `main`: its operator ("tuple_get_item", "tuple", "var" for non-calls), FLOPs and the
    bytes it reads and writes when run alone."""

    name: str
    op: str
    flops: float
    nbytes: int
    inputs: tuple[str, ...] = field(default=())
    kind: str = "elementwise"  # `call_kind`: which roofline prices it


def _numel(expr) -> int:
    shape = static_shape(getattr(expr, "ty", None))
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def op_flops(call: Call, out: Var) -> float:
    """FLOPs of one Relax operator call (multiply-add = 2), from its static shapes."""
    name = op_name(call)
    n_out = _numel(out)
    if name == "relax.matmul":
        a = static_shape(call.args[0].ty)
        return 2.0 * n_out * (a[-1] if a else 0)
    if name == "relax.einsum":
        spec = einsum_indices(call)
        return 2.0 * float(np.prod(list(spec[3].values()), dtype=np.float64)) if spec else float(n_out)
    if name in ("relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv3d"):
        w = static_shape(call.args[1].ty)
        out_channels = w[str(call.attrs.kernel_layout).index("O")] if w else 1
        return 2.0 * n_out * (int(np.prod(w)) // max(out_channels, 1) if w else 0)
    if name == "relax.nn.attention":
        q, k, v = (static_shape(a.ty) for a in call.args[:3])
        if q and k and v:  # (batch, seq, heads, dim)
            b, s, h, d = q
            s_kv, dv = k[1], v[3]
            return 2.0 * b * h * s * s_kv * (d + dv) + 5.0 * b * h * s * s_kv
    if name in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        return float(n_out * int(np.prod([int(p) for p in call.attrs.pool_size])))
    if name in ("relax.mean", "relax.sum", "relax.max", "relax.min", "relax.variance"):
        return float(_numel(call.args[0]))
    if name in fusion.VIEW_OPS or name in ("relax.permute_dims", "relax.broadcast_to", "relax.zeros_like",
                                     "relax.concat", "relax.split", "relax.take", "relax.strided_slice"):
        return 0.0
    if name == "relax.nn.batch_norm":  # returns (normalised, mean, var): count the normalised tensor's elements
        n_out = _numel(call.args[0])  # (a tuple has none: batch norm was priced at 0 FLOPs)
    return float(_PER_ELEMENT.get(name, 1) * n_out)


def op_profiles(mod: tvm.IRModule, graph: Graph | None = None) -> list[OpProfile]:
    """FLOPs and bytes of every dataflow binding of `main`, each as if it ran alone (node features)."""
    g = graph or graph_of(mod)
    return [_op_profile(g.vars[name], g.values[name]) for name in g.order]


@keepalive.per_object(MEMO_LIMIT)
def _op_profile(var: Var, value) -> OpProfile:
    op = op_name(value) or {Tuple: "tuple", TupleGetItem: "tuple_get_item"}.get(type(value), "var")
    args = fusion.inputs_of(value)
    if op.startswith("relax.") and op not in fusion.VIEW_OPS:
        flops, nbytes = op_flops(value, var), sum(tensor_info(a)[1] for a in args) + tensor_info(var)[1]
    else:
        flops, nbytes = 0.0, 0
    kind = call_kind(value) if isinstance(value, Call) else op_kind(op)
    return OpProfile(var.name, op, flops, nbytes, tuple(a.name for a in args if isinstance(a, Var)), kind)


class FusedKernel(NamedTuple):
    """One kernel `main` will run: FLOPs, bytes, the kind of its anchor op, for a matmul anchor its GEMM, and the
    shapes of the tensors it reads from outside and writes (None for one without a static shape), in the order
    met: what names the lowered kernel's arguments, whatever their order (`record_cost`)."""

    flops: float
    nbytes: int
    kind: str
    gemm: GemmShape | None = None
    shapes: tuple[tuple[int, ...] | None, ...] = ()


def einsum_indices(call) -> tuple[str, str, str, dict[str, int]] | None:
    """(lhs, rhs, output subscripts, each index letter -> its size) of a two-operand `relax.einsum` with
    explicit subscripts; None otherwise."""
    spec = str(call.attrs.subscripts).replace(" ", "")
    if "->" not in spec or "." in spec:
        return None
    inputs, out = spec.split("->")
    letters = inputs.split(",")
    operands = call.args[0].fields if isinstance(call.args[0], Tuple) else ()
    if len(letters) != 2 or len(operands) != 2:
        return None
    sizes: dict[str, int] = {}
    for indices, operand in zip(letters, operands):
        shape = static_shape(operand.ty)
        if shape is None or len(shape) != len(indices):
            return None
        sizes.update(zip(indices, (int(d) for d in shape)))
    return letters[0], letters[1], out, sizes


def _gemm_of(call) -> GemmShape | None:
    name = op_name(call)
    if name == "relax.matmul":
        return gemm_shape(static_shape(call.args[0].ty), static_shape(call.args[1].ty))
    if name != "relax.einsum" or (spec := einsum_indices(call)) is None:
        return None
    a, b, out, sizes = spec

    def size(letters) -> int:
        return int(np.prod([sizes[c] for c in letters], dtype=np.int64))

    # Output letters in both operands are batch, in one only M or N; letters summed over are K.
    return GemmShape(size([c for c in out if c in a and c in b]), size([c for c in out if c in a and c not in b]),
                     size([c for c in out if c in b and c not in a]), size([c for c in sizes if c not in out]))


def fused_groups(mod: tvm.IRModule, graph: Graph | None = None) -> list[FusedKernel]:
    """(FLOPs, bytes, kind of its anchor op, GEMM shape) of every kernel `main` will run, predicted without
    lowering.

    Kernels are `fusion.partition`'s replay of TVM's FoldConstant and FuseOps (checked against TVM's own
    lowering in the tests); a kernel of reshapes alone is a view and is left out. A kernel's bytes are the
    tensors it reads from outside (constants included) plus those it writes that are read outside (or
    returned); its FLOPs are its operators' (`op_flops`).
    """
    g = graph or graph_of(mod)
    profiles = {p.name: p for p in op_profiles(mod, g)}
    kernels = fusion.partition(g)
    group = {n: gi for gi, names in enumerate(kernels) for n in names}
    readers: dict[str, set] = {}
    for name in g.order:
        for raw in profiles[name].inputs:
            readers.setdefault(raw, set()).add(group.get(name))
    var_bytes = {name: tensor_info(g.vars[name])[1] for name in g.order}
    params = {p.name: tensor_info(p)[1] for p in g.func.params}
    out = []
    for gi, names in enumerate(kernels):
        if fusion.is_free(g, names):
            continue
        nbytes, seen, shapes = 0, set(), []
        for n in names:
            for arg in fusion.inputs_of(g.values[n]):
                if isinstance(arg, Var) and group.get(arg.name) == gi:
                    continue
                key = arg.name if isinstance(arg, Var) else id(arg)
                if key not in seen:
                    seen.add(key)
                    nbytes += tensor_info(arg)[1] if isinstance(arg, GenericConst) else \
                        var_bytes.get(arg.name, params.get(arg.name, tensor_info(arg)[1]))
                    shapes.append(tensor_info(arg)[0])
            if g.external[n] or any(r != gi for r in readers.get(n, ())):
                nbytes += var_bytes[n]
                shapes.append(tensor_info(g.vars[n])[0])
        anchor = next((n for n in names if fusion.pattern_of(g.values[n]) == fusion.OUT_EWISE_FUSABLE), names[0])
        kind = profiles[anchor].kind
        if kind == "elementwise" and any(profiles[n].kind == "transpose" for n in names):
            kind = "transpose"  # its strided side sets the pace, wherever the transpose sits in the group
        out.append(FusedKernel(sum(profiles[n].flops for n in names), nbytes, kind, _gemm_of(g.values[anchor]),
                               tuple(shapes)))
    return out


def graph_roofline_ms(mod: tvm.IRModule, hardware: Roofline) -> float:
    """Roofline latency of `main` from its Relax bindings and a fusion model (no lowering: milliseconds)."""
    return sum(hardware.time_ms(k.flops, k.nbytes, k.kind, k.gemm) for k in fused_groups(mod))


def profiles_of(lowered: tvm.IRModule) -> list[KernelProfile]:
    from tvm.s_tir.analysis import estimate_tir_flops

    calls = measure.kernel_calls(lowered)
    out = []
    for gvar, func in lowered.functions.items():
        if isinstance(func, tirx.PrimFunc) and gvar.name_hint in calls:
            try:
                flops = float(estimate_tir_flops(tvm.IRModule({gvar.name_hint: func})))
            except Exception:  # data-dependent loops: TVM cannot count them
                flops = 0.0
            out.append(KernelProfile(gvar.name_hint, tvm_ffi.structural_hash(func), calls[gvar.name_hint],
                                     flops, prim_func_bytes(func), _kernel_kind(gvar.name_hint, func)))
    return out

