"""Channels-last: every NCHW conv2d of `main` run in NHWC, with the transposes this puts between them moved through
element-wise ops until they meet and cancel, so a CNN transposes once at its input and once before its head.

    mod = tvm_rl.graph.channels_last.to_channels_last(mod)        # or, in a pass list: ChannelsLast()

Built from the graph pass's own verified rules (`conv2d_to_nhwc`, `permute_past_elementwise`, `permute_compose`,
`identity_shape_op`), applied to a fixed point instead of chosen one at a time: the pass's cost-guided choosers
rarely take the first step, as one conv moved alone costs two transposes more than it saves. Relax's own
`ConvertLayout` does the same for conv2d but leaves a transpose pair around every op it has no layout rule for
(`clip`, i.e. ReLU6, among them). Why it pays on CPU: a tuned NCHW conv vectorises along the image width, an NHWC
one along the output channels, which are many and contiguous (`docs/results/layout_rates.md`).
"""
from __future__ import annotations

import tvm

from .rules.layout import IdentityShapeOps, PermuteCompose
from .rules.nhwc import Conv2DToNHWC, PermutePastElementwise

# Each round moves every transpose at least one op on or removes it; a model's depth bounds the rounds needed.
MAX_ROUNDS = 1000


def to_channels_last(mod: tvm.IRModule, check: bool = True) -> tvm.IRModule:
    """`mod` with its NCHW conv2d's in NHWC (weights OHWI) and the transposes cancelled where element-wise ops
    allow; unchanged when `main` has no NCHW conv2d. `check` verifies the result is well formed."""
    out, converted = Conv2DToNHWC().apply_all(mod, check=False)
    if not converted:
        return mod
    cleanup = (PermutePastElementwise(), PermuteCompose(), IdentityShapeOps())
    for _ in range(MAX_ROUNDS):
        applied = 0
        for rule in cleanup:
            out, done = rule.apply_all(out, check=False)
            applied += len(done)
        if not applied:
            break
    if check and not tvm.relax.analysis.check_well_formed(out):
        raise RuntimeError("to_channels_last produced an ill-formed module")  # a rule bug, not bad input
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
