"""Numerical checks of rewrites: run rewritten modules beside the original on the same random inputs.

All variants of a model are compiled as extra functions of one module, so they share one build (and its
kernels); the build uses LLVM at opt-level 0, which compiles 3-6x faster than the default and computes the
same function, and neither fuses operators nor folds constants: each variant's fused kernels would be its own,
and folding compiles each kernel on constants separately, which together took most of a check's time for the
same values. Variants repeat most of the original's operator calls, so each distinct call (operator, attributes,
argument types) is legalised once and its kernel shared. This is a correctness check, never a timing.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from .. import measure

VERIFY_TARGET = {"kind": "llvm", "opt-level": 0}


def random_inputs(mod: tvm.IRModule, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal float (0/1 integer) arrays for the static-shaped parameters of `main`."""
    from .rules.ir import static_shape

    rng = np.random.default_rng(seed)
    out = []
    for param in mod["main"].params:
        shape, dtype = static_shape(param.ty), str(param.ty.dtype)
        if shape is None:
            raise ValueError(f"parameter {param.name} of main has no static shape")
        if dtype.startswith(("int", "uint", "bool")):
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            out.append(rng.standard_normal(shape).astype(dtype))
    return out


def run_variants(original: tvm.IRModule, variants: Mapping[str, tvm.IRModule],
                 inputs: Sequence[np.ndarray], target=None) -> dict[str, list[np.ndarray]]:
    """Outputs of `original` (key "original") and of every variant on `inputs`, from one build."""
    target = measure.parse_target(target or VERIFY_TARGET)
    mods = {"original": original, **variants}
    if any(len(m.functions) != 1 for m in mods.values()):
        raise ValueError("run_variants expects modules holding only `main`")
    symbols = {key: f"variant_{i}" for i, key in enumerate(mods)}
    # Variants share Var objects with the original; each copy needs its own for the build's passes.
    funcs = {symbols[k]: relax.utils.copy_with_new_vars(m["main"]).with_attr("global_symbol", symbols[k])
             for k, m in mods.items()}
    legalize = tvm.transform.module_pass(lambda mod, _ctx: legalize_once(mod), opt_level=0, name="LegalizeOnce")
    runner = measure.Runner(measure.build(tvm.IRModule(funcs), target, fuse=False, legalize=legalize), target)
    args = runner.device_tensors(inputs)
    return {k: measure.to_numpy(runner.vm[symbols[k]](*args)) for k in mods}


def legalize_once(mod: tvm.IRModule) -> tvm.IRModule:
    """`relax.transform.LegalizeOps`, with the kernel of each distinct operator call (operator, attributes,
    argument and result types) made once and reused by every structurally equal call in the module."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    made: dict[int, list[tuple[tuple, relax.Call]]] = {}

    def once(default):
        def legalize(bb, call):
            signature = (call.op, call.attrs, [arg.ty for arg in call.args], call.ty_args)
            key = tvm_ffi.structural_hash(signature)
            for seen, lowered in made.get(key, []):
                if tvm_ffi.structural_equal(seen, signature):
                    return relax.Call(call_tir, [lowered.args[0], relax.Tuple(list(call.args))], lowered.attrs,
                                      lowered.ty_args)
            lowered = default(bb, call)
            # Reusable only when the kernel takes exactly the call's arguments, in order (no flattened tuples,
            # no symbolic-shape arguments).
            if (isinstance(lowered, relax.Call) and lowered.op.same_as(call_tir) and len(lowered.args) == 2
                    and len(lowered.args[1].fields) == len(call.args)
                    and all(a.same_as(b) for a, b in zip(lowered.args[1].fields, call.args))):
                made.setdefault(key, []).append((signature, lowered))
            return lowered
        return legalize

    ops: set[str] = set()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func, lambda e: ops.add(e.op.name) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)
                else None)
    defaults = {name: tvm.ir.Op.get(name).get_attr("FLegalize") for name in ops}
    return relax.transform.LegalizeOps({n: once(f) for n, f in defaults.items() if f is not None})(mod)


def compare_variants(original: tvm.IRModule, variants: Mapping[str, tvm.IRModule],
                     inputs: Sequence[np.ndarray] | None = None, rtol: float = 1e-4, atol: float = 1e-4,
                     target=None) -> dict[str, measure.Comparison]:
    """Each variant's outputs against the original's; `atol` is relative to each output's largest magnitude
    (so a small output is judged at its own scale, not at a larger sibling's)."""
    inputs = random_inputs(original) if inputs is None else inputs
    outs = run_variants(original, variants, inputs, target)
    ref = outs.pop("original")
    atols = [atol * measure.output_scale([r]) for r in ref]
    return {k: measure.compare(out, ref, rtol=rtol, atol=atols) for k, out in outs.items()}
