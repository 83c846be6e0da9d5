"""Numerical checks of rewrites: run rewritten modules beside the original on the same random inputs.

All variants of a model are compiled as extra functions of one module, so they share one build (and its
kernels); the build uses LLVM at opt-level 0, which compiles 3-6x faster than the default and computes the
same function. This is a correctness check, never a timing.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import tvm
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
    runner = measure.Runner(measure.build(tvm.IRModule(funcs), target), target)
    args = runner.device_tensors(inputs)
    return {k: measure.to_numpy(runner.vm[symbols[k]](*args)) for k in mods}


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
