"""Channels-last: every NCHW conv2d of `main` run in NHWC, with the transposes this puts between them moved through
the ops between convolutions until they meet and cancel, so a CNN transposes once at its input and once before its
head.

    mod = tvm_rl.graph.channels_last.to_channels_last(mod)        # or, in a pass list: ChannelsLast()

Relax's `ConvertLayout` moves the convolutions and carries NHWC through the ops it has a layout rule for (pools,
concat, element-wise arithmetic, reductions), but leaves a transpose pair around each op it has none for (`clip`,
i.e. ReLU6, among them). The graph pass's own verified rules (`permute_past_elementwise`, `permute_compose`,
`identity_shape_op`, `fold_const_transform`, and `fold_tuple_get_item` for the dead transposes an exported pool's
index tensor leaves), applied to a fixed point, then cancel those pairs and pre-transpose the weights. The pass's
cost-guided choosers do not take such a step one conv at a time, as one conv moved alone costs two transposes
more than it saves. Why it pays on CPU: a tuned NCHW conv vectorises along the image width, an NHWC one along the
output channels, which are many and contiguous (`docs/results/layout_rates.md`).
"""
from __future__ import annotations

import logging

import tvm
from tvm import relax

from .rules.layout import FoldConstTransform, IdentityShapeOps, PermuteCompose
from .rules.nhwc import PermutePastElementwise
from .rules.simplify import FoldTupleGetItem

log = logging.getLogger("tvm_rl.graph")

# Each round moves every transpose at least one op on or removes it; a model's depth bounds the rounds needed.
MAX_ROUNDS = 1000
LAYOUTS = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


def _nchw_convs(mod: tvm.IRModule) -> int:
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, relax.Call) and getattr(
        e.op, "name", "") == "relax.nn.conv2d" and e.attrs.data_layout == "NCHW" else None)
    return len(found)


@relax.expr_functor.mutator
class _UniqueNames(relax.PyExprMutator):
    """Renames variables bound under a name taken before (`ConvertLayout` reuses names; the rules need them
    unique), by a numbered suffix."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.taken: set[str] = set()  # the parameters' names come first, as they are visited first

    def _fresh(self, var, kind):
        name, i = var.name, 1
        while name in self.taken:
            name, i = f"{var.name}_{i}", i + 1
        self.taken.add(name)
        return var if name == var.name else kind(name, var.ty)

    def visit_var_def_(self, var):
        return self._fresh(var, relax.Var)

    def visit_dataflow_var_def_(self, var):
        return self._fresh(var, relax.DataflowVar)


def _unique_names(mod: tvm.IRModule) -> tvm.IRModule:
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    out["main"] = _UniqueNames(mod).visit_expr(mod["main"])
    return out


def to_channels_last(mod: tvm.IRModule, check: bool = True) -> tvm.IRModule:
    """`mod` with its NCHW conv2d's in NHWC (weights OHWI) and the transposes cancelled where the ops between them
    allow; `mod` itself when `main` has no NCHW conv2d. `check` verifies the result is well formed."""
    if not _nchw_convs(mod):
        return mod
    try:
        out = _converted(mod)
    except Exception as err:  # noqa: BLE001  (TVM raises many kinds from inside ConvertLayout; so may a rule)
        log.warning("channels-last: left the module in NCHW, as converting it failed: %s", str(err).splitlines()[0])
        return mod
    if check and not relax.analysis.check_well_formed(out):
        raise RuntimeError("to_channels_last produced an ill-formed module")  # a rule bug, not bad input
    return out


def _converted(mod: tvm.IRModule) -> tvm.IRModule:
    # ConvertLayout transposes a tensor once per reader in the other layout (an input read by a conv and by a
    # residual add): common-subexpression elimination makes that one transpose.
    out = relax.transform.EliminateCommonSubexpr()(relax.transform.ConvertLayout(LAYOUTS)(mod))
    out = _unique_names(out)
    cleanup = (PermutePastElementwise(), PermuteCompose(), IdentityShapeOps(), FoldConstTransform(),
               FoldTupleGetItem())
    for _ in range(MAX_ROUNDS):
        applied = 0
        for rule in cleanup:
            out, done = rule.apply_all(out, check=False)
            applied += len(done)
        if not applied:
            break
    return out


def default_for(target: tvm.target.Target | str) -> bool:
    """Whether `tvm_rl.optimize` runs convolutions channels-last by default: on CPU targets, where the tuned NHWC
    build was measured faster; not on GPUs, where it was not measured."""
    from ..measure import is_gpu, parse_target

    return not is_gpu(parse_target(target))


@tvm.transform.module_pass(opt_level=0, name="tvm_rl.ChannelsLast")
class ChannelsLast:
    """`to_channels_last` as a TVM module pass."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        return to_channels_last(mod)
