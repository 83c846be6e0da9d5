"""Targets, builds, timed runs (warm-up, median of repeats), per-kernel timing and checks against a reference.

Every stage takes and returns TVM's own objects (IRModule, Target, Database), so it can be used alone from a
compile script.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

from .database import DatabaseLike, as_database
from .errors import BuildError, MismatchError, TargetError

# ---------------------------------------------------------------------------------------------- targets


def host_cpu_target(mcpu: str | None = None, cores: int | None = None) -> tvm.target.Target:
    """An LLVM target for the host's CPU (its `mcpu` detected by LLVM, unless given)."""
    mcpu = mcpu or tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": cores or os.cpu_count() or 1})


def cuda_target(arch: str = "sm_90") -> tvm.target.Target:
    """A CUDA target for compute capability `arch` (e.g. "sm_80", "sm_90"), with the host set to LLVM."""
    if not arch.startswith("sm_"):
        raise TargetError(f"CUDA arch must look like 'sm_90', got {arch!r}")
    # Stating the per-block limits (those of every sm_70+ GPU without opt-in) keeps dlight and MetaSchedule
    # from guessing them with a warning.
    return tvm.target.Target({"kind": "cuda", "arch": arch, "max_shared_memory_per_block": 49152,
                              "max_threads_per_block": 1024, "thread_warp_size": 32}, host={"kind": "llvm"})


def parse_target(spec: str | dict | tvm.target.Target) -> tvm.target.Target:
    """A Target from "llvm" / "cpu" (the host's CPU), "cuda" / "cuda:sm_80", a JSON dict (or its text), or a Target."""
    if isinstance(spec, tvm.target.Target):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as err:
                raise TargetError(f"target {spec!r} is not valid JSON: {err}") from None
        elif text in ("llvm", "cpu"):
            return host_cpu_target()
        elif text == "cuda" or text.startswith("cuda:"):
            return cuda_target(text.split(":", 1)[1] if ":" in text else "sm_90")
        else:
            raise TargetError(f"unknown target {spec!r}; use 'llvm', 'cuda', 'cuda:sm_80' or a JSON target dict")
    try:
        return tvm.target.Target(spec)
    except Exception as err:
        raise TargetError(f"TVM rejected target {spec!r}: {err}") from None


def device_for(target: tvm.target.Target) -> tvm.runtime.Device:
    """The device a build for `target` runs on; an error naming the target if that device is absent."""
    kind = target.kind.name
    dev = tvm.cpu() if kind == "llvm" else tvm.device(kind, 0)
    if not dev.exist:
        raise TargetError(f"no {kind} device on this machine for target {target}; "
                          "build here and run on a machine that has one (or use target 'llvm')")
    return dev


def is_gpu(target: tvm.target.Target) -> bool:
    return "gpu" in target.keys


# ------------------------------------------------------------------------------------------------ builds


def _backend(target: tvm.target.Target):
    """The backend's pipeline module. TVM 0.27's `relax.pipeline.dataflow_lower_passes` looks these up on
    the backend packages, which do not re-export them (AttributeError), so we go to the modules directly."""
    import importlib

    name = {"llvm": "cpu_generic", "cuda": "cuda", "rocm": "rocm"}.get(target.kind.name, "gpu_generic")
    return importlib.import_module(f"tvm.relax.backend.{name}.pipeline")


def kernel_stage(mod: tvm.IRModule, target: tvm.target.Target, database: DatabaseLike = None,
                 schedule_rest: bool = True, fuse: bool = True,
                 legalize: tvm.transform.Pass | None = None) -> tvm.IRModule:
    """The module after the standard pipeline's dispatch, legalisation and fusion: one PrimFunc per kernel.

    With a MetaSchedule `database` (or a folder, opened by `as_database`), tuned schedules replace the kernels
    it has records for. On GPU targets dlight then schedules the rest (TVM's default) unless `schedule_rest` is
    False (the kernels as the database lookup sees them: what tuning needs); on CPU untuned kernels stay the
    naive loops TVM emits. With `fuse` False there is one kernel per operator and no constant folding: the same
    values, compiled several times faster where many variants of one model are built together (each fused
    variant brings its own kernels, and folding compiles every kernel on constants on its own). `legalize`
    replaces `relax.transform.LegalizeOps()` (after the backend's library dispatch, as there).
    """
    gpu = is_gpu(target)
    passes = [
        *_backend(target).library_dispatch_passes(target),
        legalize or relax.transform.LegalizeOps(),
        *([relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(), relax.transform.FuseOps(),
           relax.transform.FuseTIR()] if fuse else []),
        # On CPU the weights (the module's constants) are marked layout-free, so that MetaSchedule's RewriteLayout
        # repacks each one for its kernel's tuned tiling (TVM's cpu_weight_prepack): without the mark every GEMM
        # reads its weight row by row, which capped tuned GEMMs at about half the packed speed.
        *([] if gpu else [relax.transform.AttachAttrLayoutFreeBuffers()]),
    ]
    database = as_database(database)
    with target, tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential(passes)(mod)
        if database is not None:
            with database:
                mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
            if not gpu:
                # Each tuned kernel's weight repacking becomes its own function, folded into the constant at build.
                mod = tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                                relax.transform.FoldConstant()])(mod)
        if gpu and schedule_rest:
            mod = _dlight(mod)
    return mod


def _dlight(mod: tvm.IRModule) -> tvm.IRModule:
    """dlight's default GPU schedules, kernel by kernel. In TVM 0.27 the GEMV rule asserts on some 1x1
    convolutions (MobileNet-v2 at batch 1), which fails the whole default CUDA build; such a kernel gets the
    other rules instead, and a warning names it."""
    import logging

    from tvm.s_tir import dlight as dl

    def rules(gemv: bool):
        return [dl.gpu.Matmul(), *([dl.gpu.GEMV()] if gemv else []), dl.gpu.Reduction(),
                dl.gpu.GeneralReduction(), dl.gpu.Fallback()]

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs, global_infos=mod.global_infos)
    for gvar, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        single = tvm.IRModule({gvar.name_hint: func})
        try:
            scheduled = dl.ApplyDefaultSchedule(*rules(True))(single)
        except Exception as err:  # TVM raises AssertionError/TVMError from deep inside the rule
            logging.getLogger(__name__).warning("dlight GEMV rule failed on kernel %s (%s); scheduling it "
                                                "without that rule", gvar.name_hint, type(err).__name__)
            scheduled = dl.ApplyDefaultSchedule(*rules(False))(single)
        out.update_func(gvar, scheduled[gvar.name_hint])
    return out


def build(mod: tvm.IRModule, target: tvm.target.Target | str, database: DatabaseLike = None, fuse: bool = True,
          legalize: tvm.transform.Pass | None = None):
    """Compile a Relax module with the standard pipeline (optionally with tuned kernels) to a VM executable;
    `fuse` and `legalize` as in `kernel_stage`."""
    target = parse_target(target)
    database = as_database(database)  # a bad database is a DatabaseError, not a failed build
    try:
        kernels = kernel_stage(mod, target, database, fuse=fuse, legalize=legalize)
        finish = tvm.transform.Sequential(
            _backend(target).dataflow_lower_passes(target) + _backend(target).finalize_passes(target))
        with target, tvm.transform.PassContext(opt_level=3):
            return tvm.compile(kernels, target, relax_pipeline=finish)
    except Exception as err:
        raise BuildError(f"building for {target.kind.name} failed: {type(err).__name__}: "
                         f"{str(err).strip().splitlines()[-1] if str(err).strip() else ''}") from err


def to_numpy(out) -> list[np.ndarray]:
    """VM outputs (a tensor or nested tuples of them) as a flat list of numpy arrays."""
    if isinstance(out, tvm.runtime.Tensor):
        return [out.numpy()]
    if isinstance(out, (list, tuple, tvm_ffi.Array)):
        return [y for x in out for y in to_numpy(x)]
    raise TypeError(f"unexpected VM output {type(out).__name__}")


class Runner:
    """A built executable loaded on its device, callable on numpy inputs."""

    def __init__(self, executable, target: tvm.target.Target | str):
        self.target = parse_target(target)
        self.device = device_for(self.target)
        self.vm = relax.VirtualMachine(executable, self.device)

    def device_tensors(self, inputs: Sequence[np.ndarray]) -> list:
        """`inputs` copied to the runner's device, as the VM's `main` takes them."""
        return [tvm.runtime.tensor(np.ascontiguousarray(x), self.device) for x in inputs]

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return to_numpy(self.vm["main"](*self.device_tensors(inputs)))

    def time(self, inputs: Sequence[np.ndarray], warmup: int = 2, repeat: int = 10,
             min_repeat_ms: int = 0) -> "Timing":
        """Median and spread of `repeat` timed runs after `warmup` untimed ones (device-synchronised)."""
        args = self.device_tensors(inputs)
        for _ in range(warmup):
            self.vm["main"](*args)
        self.device.sync()
        evaluator = self.vm.time_evaluator("main", self.device, number=1, repeat=repeat,
                                           min_repeat_ms=int(min_repeat_ms))
        return summarize([s * 1e3 for s in evaluator(*args).results])


# ------------------------------------------------------------------------------------------------ timing


@dataclass(frozen=True)
class Timing:
    """Latency statistics in milliseconds over repeated runs."""

    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    repeats: int

    def __str__(self) -> str:
        return f"{self.median_ms:.3f} ms (min {self.min_ms:.3f}, IQR {self.iqr_ms:.3f}, n={self.repeats})"

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_ms: Sequence[float]) -> Timing:
    """Median, extremes and inter-quartile range of latency samples (ms)."""
    if len(samples_ms) == 0:
        raise ValueError("no timing samples to summarise")
    xs = sorted(float(s) for s in samples_ms)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    return Timing(statistics.median(xs), xs[0], xs[-1], q3 - q1, len(xs))


def time_interleaved(runners: dict[str, "Runner"], inputs: Sequence[np.ndarray], repeat: int = 10,
                     warmup: int = 2, samples_out: dict[str, list[float]] | None = None) -> dict[str, Timing]:
    """Time several builds of one model in rounds: each round runs every build once, in turn.

    Timed one after another, a burst of load from another process lands on one build and passes for a
    difference between builds (two builds of the same graph can differ by several percent that way on a busy
    machine). In rounds, every build sees the same load, so their ratios hold. `samples_out`, when given, receives
    each build's samples in round order (for paired statistics across builds)."""
    args = {k: r.device_tensors(inputs) for k, r in runners.items()}
    for key, runner in runners.items():
        for _ in range(warmup):
            runner.vm["main"](*args[key])
        runner.device.sync()
    evaluators = {k: r.vm.time_evaluator("main", r.device, number=1, repeat=1) for k, r in runners.items()}
    samples: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(repeat):
        for key, evaluator in evaluators.items():
            samples[key].append(evaluator(*args[key]).results[0] * 1e3)
    if samples_out is not None:
        samples_out.update(samples)
    return {k: summarize(v) for k, v in samples.items()}


def time_callable(fn: Callable[[], object], warmup: int = 2, repeat: int = 10,
                  sync: Callable[[], object] | None = None) -> Timing:
    """Time a zero-argument callable (PyTorch, ONNX Runtime, ...) with warm-up and `repeat` samples."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return summarize(samples)


# ----------------------------------------------------------------------------------------- correctness


@dataclass(frozen=True)
class Comparison:
    """Worst element-wise error between outputs and a reference (over all outputs)."""

    max_abs_err: float
    max_rel_err: float
    worst_output: int
    ok: bool


def compare(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float = 1e-4,
            atol: float | Sequence[float] = 1e-4) -> Comparison:
    """Compare outputs elementwise: ok when |a - e| <= atol + rtol * |e| everywhere (numpy's allclose rule).

    `atol` is one tolerance for all outputs or one per output."""
    if len(actual) != len(expected):
        raise MismatchError(f"{len(actual)} outputs, but the reference has {len(expected)}")
    atols = [float(atol)] * len(expected) if np.isscalar(atol) else [float(t) for t in atol]
    if len(atols) != len(expected):
        raise ValueError(f"{len(atols)} tolerances for {len(expected)} outputs")
    worst_abs, worst_rel, worst_i, ok = 0.0, 0.0, 0, True
    for i, (a, e, atol) in enumerate(zip(actual, expected, atols)):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape:
            raise MismatchError(f"output {i} has shape {a.shape}, the reference {e.shape}")
        if a.dtype == bool or np.issubdtype(a.dtype, np.integer):
            a, e = a.astype(np.int64), e.astype(np.int64)
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        finite = np.isfinite(a) == np.isfinite(e)
        within = finite & ((diff <= atol + rtol * np.abs(e)) | (a == e))
        abs_err = float(np.nanmax(np.where(np.isfinite(diff), diff, np.inf))) if diff.size else 0.0
        rel_err = float(np.max(diff / (np.abs(e) + atol))) if diff.size else 0.0
        if abs_err > worst_abs or not within.all():
            worst_i = i if not within.all() or ok else worst_i
        worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel_err)
        ok = ok and bool(within.all())
    return Comparison(worst_abs, worst_rel, worst_i, ok)


def output_scale(reference: Sequence[np.ndarray]) -> float:
    """The largest magnitude in `reference` (1.0 when it is empty or all zero): a scale for an absolute tolerance."""
    return max((float(np.abs(r).max()) for r in reference if np.asarray(r).size), default=0.0) or 1.0


def tolerance(reference: Sequence[np.ndarray]) -> float:
    """An absolute tolerance for whole-model outputs, scaled to their magnitude (float32 sums over deep models
    drift with it): 1e-3 x the largest magnitude, at least 1e-3."""
    return 1e-3 * max(1.0, output_scale(reference))


def assert_close(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float = 1e-4,
                 atol: float = 1e-4, what: str = "outputs") -> Comparison:
    """`compare`, raising MismatchError (naming the output and the error) when outside tolerance."""
    result = compare(actual, expected, rtol, atol)
    if not result.ok:
        raise MismatchError(f"{what}: output {result.worst_output} differs from the reference: max abs error "
                            f"{result.max_abs_err:.3g} > tolerance (rtol={rtol:g}, atol={atol:g})")
    return result


# -------------------------------------------------------------------------------------------- kernels


@dataclass(frozen=True)
class KernelTiming:
    """One lowered kernel: its name, structural hash, how often the model calls it and its median latency."""

    name: str
    structural_hash: int
    calls: int
    timing: Timing

    @property
    def total_ms(self) -> float:
        return self.calls * self.timing.median_ms


def kernel_calls(mod: tvm.IRModule) -> dict[str, int]:
    """How many times the Relax functions of `mod` call each PrimFunc (through call_tir and friends)."""
    counts: dict[str, int] = {}

    def visit(expr):
        if isinstance(expr, relax.Call):
            for arg in expr.args:
                if isinstance(arg, tvm.ir.GlobalVar) and isinstance(mod[arg], tirx.PrimFunc):
                    counts[arg.name_hint] = counts.get(arg.name_hint, 0) + 1

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return counts


def random_args(func: tirx.PrimFunc, device: tvm.runtime.Device, rng: np.random.Generator) -> list:
    """Random tensors matching a PrimFunc's buffer parameters (static shapes only)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    args = []
    for info in ArgInfo.from_prim_func(func):
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        if dtype.startswith(("int", "uint")):
            data = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            data = rng.uniform(-1, 1, size=shape).astype(dtype)
        args.append(tvm.runtime.tensor(data, device))
    return args


def time_kernels(mod: tvm.IRModule, target: tvm.target.Target | str, database: DatabaseLike = None, repeat: int = 10,
                 seed: int = 0) -> list[KernelTiming]:
    """Build and time every kernel of `mod` alone on random inputs (the cost the graph search adds up)."""
    target = parse_target(target)
    return time_lowered_kernels(kernel_stage(mod, target, database), target, repeat, seed)


def time_lowered_kernels(lowered: tvm.IRModule, target: tvm.target.Target, repeat: int = 10,
                         seed: int = 0) -> list[KernelTiming]:
    """`time_kernels` of a module already at `kernel_stage` (one PrimFunc per kernel)."""
    device = device_for(target)
    calls = kernel_calls(lowered)
    rng = np.random.default_rng(seed)
    out = []
    for gvar, func in lowered.functions.items():
        if not isinstance(func, tirx.PrimFunc) or gvar.name_hint not in calls:
            continue
        name = gvar.name_hint
        single = tvm.IRModule({name: func.with_attr("global_symbol", name)})
        try:
            lib = tvm.compile(single, target=target)
        except Exception as err:
            raise BuildError(f"kernel {name} failed to build for {target.kind.name}: {err}") from err
        args = random_args(func, device, rng)
        evaluator = lib.jit().time_evaluator(name, device, number=1, repeat=repeat)
        lib[name](*args)  # warm-up
        timing = summarize([s * 1e3 for s in evaluator(*args).results])
        out.append(KernelTiming(name, tvm_ffi.structural_hash(func), calls[name], timing))
    return out
