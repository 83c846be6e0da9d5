"""`tvm_rl.optimize` (defined here, exported by the package): the whole flow in one call.

model (torch module + example inputs, ONNX file, Hugging Face folder, or Relax IRModule) -> Relax -> RLRewritePass
-> kernels tuned by a search strategy (`search_strategy.DEFAULT`) into one database -> build -> outputs checked
against the source model -> a runnable, exportable module and a report of every stage's latency and time.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import tvm
import tvm_ffi

from . import measure, models, paths
from .database import TuningDatabase
from .errors import MismatchError, TvmRlError
from .fast_math import default_for as fast_math_default
from .fast_math import fast_math as lower_fast_math
from .graph import defaults
from .graph.channels_last import default_for as channels_last_default
from .graph.channels_last import to_channels_last


@dataclass
class OptimizeReport:
    """Latencies (median ms) of the default build of the input and of the result, and seconds per stage."""

    model: str
    target: str
    default_ms: float = 0.0
    optimized_ms: float = 0.0
    graph_rewrites: list[str] = field(default_factory=list)
    graph_reason: str = ""
    graph_policy: str = ""  # what chose the graph rewrites (an arm of tvm_rl.graph.arms; "" when skipped)
    kernels_tuned: int = 0
    trials_measured: int = 0
    kernels_from_library: int = 0  # kernels given a schedule library's record, unmeasured
    search_errors: dict[str, str] = field(default_factory=dict)  # kernel: why its search failed (it ended early)
    max_abs_err: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)
    tuned_ms: float = 0.0  # the rewritten, tuned build's latency, even when it lost to the default build
    kept_default: bool = False  # True when the tuned build measured slower, so the default build was returned
    graph_rounds: list[dict] = field(default_factory=list)  # with graph_rounds > 1: each round's graph and latency
    fast_math: bool = False  # True when erf / exp / tanh (GELU, SiLU, sigmoid, softmax) were built fast (`fast_math`)
    channels_last: bool = False  # True when convolutions were run in NHWC (`graph.channels_last`)

    @property
    def speedup(self) -> float:
        return self.default_ms / self.optimized_ms if self.optimized_ms else 1.0

    def summary(self) -> str:
        stages = ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items())
        library = f" ({self.kernels_from_library} from the library, unmeasured)" if self.kernels_from_library else ""
        if self.search_errors:
            library += f" ({len(self.search_errors)} ended early, their search failed: {', '.join(self.search_errors)})"
        return (f"{self.model} on {self.target}: {self.default_ms:.3f} ms (TVM default build) -> "
                f"{self.optimized_ms:.3f} ms optimized ({self.speedup:.2f}x); {len(self.graph_rewrites)} graph "
                f"rewrites{f' ({self.graph_policy})' if self.graph_policy else ''}"
                f"{', channels-last' if self.channels_last else ''}{', fast math' if self.fast_math else ''}, "
                f"{self.trials_measured} measurements over "
                f"{self.kernels_tuned} kernels{library}; "
                f"outputs match the source model (max abs err {self.max_abs_err:.2g}); {stages}"
                + (f". The rewritten, tuned build measured {self.tuned_ms:.3f} ms, slower than the default build, so "
                   "the default build is returned (more --trials per kernel or a larger --budget usually fixes this)"
                   if self.kept_default else ""))


@dataclass
class Optimized:
    """The optimized module (`mod`), its executable and database, the inputs it was checked on, the report."""

    mod: tvm.IRModule
    executable: object
    target: tvm.target.Target
    database: tvm.s_tir.meta_schedule.Database | None  # None when the untuned build was kept
    inputs: list[np.ndarray]
    report: OptimizeReport
    # the graph pass's output (with fast math applied when the report says so), also when the default build was kept
    rewritten: tvm.IRModule | None = None
    # the source model's output structure (`models.Model.output_spec`); None: a flat list
    output_spec: object | None = None

    def __call__(self, *inputs: np.ndarray) -> Any:
        """The outputs (numpy arrays) on `inputs` (by default the example inputs), in the source model's structure
        (its ModelOutput, dict or nested tuples); a list when it returns one tensor or has no structure."""
        runner = measure.Runner(self.executable, self.target)
        return models.importer.structure(runner(list(inputs) if inputs else self.inputs), self.output_spec)

    def export(self, path: str | Path) -> Path:
        """Write the compiled library (`.so`; load with `tvm.runtime.load_module` + `relax.VirtualMachine`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.executable.export_library(str(path))
        return path


def _as_model(model, example_inputs, shapes, name) -> models.Model:
    if isinstance(model, models.Model):
        return model
    if isinstance(model, (str, Path)):
        path = Path(model)
        if models.huggingface.is_pretrained_dir(path):
            return models.huggingface.from_pretrained_dir(path, shapes=shapes, name=name)
        if path.suffix == ".onnx" or path.exists():
            return models.from_onnx(path, shapes=shapes, name=name)
        return models.load(str(model), "tiny")  # a zoo name
    if isinstance(model, tvm.IRModule):
        from .graph.verify import random_inputs

        inputs = list(example_inputs) if example_inputs is not None else random_inputs(model)
        return models.Model(name or "module", model, inputs, reference=None, source="relax")
    import torch

    if isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise TvmRlError("optimize(torch_module) needs example_inputs: a tuple of tensors with the input shapes")
        return models.from_torch(model, tuple(example_inputs), name=name or type(model).__name__)
    raise TvmRlError(f"optimize() takes a torch.nn.Module, an .onnx path, a Hugging Face model folder, a zoo model "
                     f"name or a Relax IRModule, not {type(model).__name__}")


@dataclass
class _Round:
    """One rewrite-and-tune round of `optimize`: its graph, database, built runner and pass report."""

    mod: tvm.IRModule
    database: tvm.s_tir.meta_schedule.Database
    executable: object
    runner: measure.Runner
    max_abs_err: float
    rl: object | None  # the graph pass's last_report (None: no rewriting)
    tuned_ms: float = 0.0


def _rewrite(mod: tvm.IRModule, target: tvm.target.Target, tuning: TuningDatabase | None, policy, steps: int,
             seconds: float, seed: int, fast_math: bool) -> tuple[tvm.IRModule, object]:
    """The graph pass on `mod`, priced by the roofline fitted to `tuning`'s tuned kernels (nominal when there
    are none); (rewritten module, the pass's report)."""
    from .graph.calibration import proxy_roofline
    from .graph.cost import roofline_cost
    from .graph.rewrite_pass import RLRewritePass

    # Kernels tuned by an earlier run or round in this work dir price the graph better than the nominal roofline.
    rl = RLRewritePass(target, policy, max_steps=steps, time_budget_s=seconds, confirm=False, seed=seed,
                       cost=roofline_cost(proxy_roofline(target, tuning)), fast_math=fast_math)
    out = rl(mod)
    return out, rl.last_report


def _switch(value: bool | None, default_for: Callable[[tvm.target.Target], bool], target: tvm.target.Target) -> bool:
    """A per-target switch (fast math, channels-last) as given, or the target's default where None."""
    return default_for(target) if value is None else bool(value)


def graph_stage(mod: tvm.IRModule, target: tvm.target.Target | str, tuning: str | Path | TuningDatabase | None = None,
                policy=None, rewrite_steps: int = defaults.MAX_STEPS,
                rewrite_seconds: float = defaults.TIME_BUDGET_S, seed: int = 0,
                fast_math: bool | None = None, channels_last: bool | None = None) -> tuple[tvm.IRModule, object]:
    """The module `optimize`'s first round tunes and builds: `mod` rewritten by the graph pass (priced by the
    records of `tuning`, a tuning folder, where it has any), its convolutions then moved to NHWC where
    `channels_last` (None: `graph.channels_last.default_for(target)`), and erf/exp/tanh approximated where
    `fast_math` (None: `fast_math.default_for(target)`). Returns (module, the graph pass's report). Usable alone,
    e.g. to tune the graph `optimize` would with another tuner."""
    target = measure.parse_target(target)
    fast = _switch(fast_math, fast_math_default, target)
    folder = tuning if isinstance(tuning, TuningDatabase) or tuning is None else TuningDatabase(tuning)
    out, report = _rewrite(mod, target, folder, policy, rewrite_steps, rewrite_seconds, seed, fast)
    if _switch(channels_last, channels_last_default, target):
        out = to_channels_last(out)
    return (lower_fast_math(out) if fast else out), report


def optimize(model, target: tvm.target.Target | str = "llvm", example_inputs: Sequence | None = None,
             shapes: dict[str, Sequence[int]] | None = None, name: str | None = None,
             work_dir: str | Path | None = None, rewrite: bool = True, policy=None,
             rewrite_steps: int = defaults.MAX_STEPS, rewrite_seconds: float = defaults.TIME_BUDGET_S,
             trials_per_kernel: int = 16, strategy: str | None = None, seed: int = 0, repeat: int = 20,
             rtol: float = 1e-3, atol: float = 1e-3, cost_model: str | None = None,
             graph_rounds: int = 1, fast_math: bool | None = None, budget: int | None = None,
             minutes: float | None = None, library: str | Path | None = "default",
             channels_last: bool | None = None, measurement: str = "warm") -> Optimized:
    """Optimize `model` for `target`; everything it writes goes under `work_dir` (None: `paths.work_dir()`; database in
    `work_dir/tuning/<target kind>`, report in `work_dir/optimize_<name>.json`). `policy` chooses the graph
    pass's rewrites, as `RLRewritePass(policy=...)` takes it: None is `tvm_rl.graph.arms.DEFAULT_ARM`
    ("cheapest-first", a rule without learning, which the learned policy did not beat); "trained" or a
    checkpoint path runs a learned policy. `strategy` searches each kernel's schedules (None:
    `tvm_rl.tune.search_strategy.DEFAULT`, the arm the tuner benchmark measured best). `cost_model` rates the
    tuner's candidates, as `tvm-rl tune --cost-model` takes it (None: the model shipped for the target kind where
    there is one, refined on the run's records, else MetaSchedule's XGBModel; "xgb": MetaSchedule's XGBModel; or a
    model file). `graph_rounds` > 1 runs the graph pass again after each tuning, priced by the roofline refitted
    on the kernels tuned so far (the first round prices with the nominal one unless the work dir has a
    database), tunes the new graph's new kernels, and keeps the round whose build measures fastest; it stops
    early when a round chooses a graph an earlier one did. `fast_math` builds erf, exp and tanh (GELU, SiLU,
    sigmoid, softmax) with TVM's vectorisable approximations (`tvm_rl.fast_math`, a few ulp off): None turns it on
    for CPU targets, where it was measured faster, and off for GPUs, where it was not measured. Raises
    MismatchError if the optimized module's outputs differ from the source model's by more than rtol/atol (atol
    relative to the largest output). `budget` (measurements) and/or `minutes` replace `trials_per_kernel` with one
    budget for the whole model, spent on the kernels where its latency is (`tune_model`); with `graph_rounds` > 1
    each round gets the budget and the minutes again (the database's records of a round's kernels count).
    `channels_last` runs the convolutions in NHWC after the graph pass (`graph.channels_last`; None: on for CPU
    targets, where it was measured faster, off for GPUs; without `rewrite`, off). `library` is the schedule library
    the tuning starts from (`tune_workloads(library=...)`): by default the one shipped for the target kind where one
    ships (CPUs; its kernels measured on its CPU are applied unmeasured only on that CPU, elsewhere its schedules
    are measured first), a library file, or None for none. `measurement` is how the tuner times candidates: "warm"
    (MetaSchedule's default: calls repeated, weights cached) or "cold" (CPU only: single calls, the weights flushed
    from the cache before each, as inside a model; `tune.runner.cold_runner`; the library's warm-timed records then
    seed the search instead of being applied unmeasured)."""
    from .tune import tune_model
    from .tune.cost_model import from_spec as cost_model_from_spec
    from .tune.library import open_library
    from .tune.runner import runner_for

    target = measure.parse_target(target)
    tuning_runner = runner_for(target, measurement)
    whole_model = budget is not None or minutes is not None
    library = open_library(library, target.kind.name)  # read once, before any slow step
    work = Path(work_dir) if work_dir is not None else paths.work_dir()
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    m = _as_model(model, example_inputs, shapes, name)
    seconds["import"] = time.perf_counter() - t
    report = OptimizeReport(m.name, str(target.kind.name))
    report.fast_math = _switch(fast_math, fast_math_default, target)
    report.channels_last = rewrite and _switch(channels_last, channels_last_default, target)
    expected = m.reference_outputs() if m.reference is not None else None

    t = time.perf_counter()
    default_executable = measure.build(m.mod, target)
    default = measure.Runner(default_executable, target)
    if expected is None:  # an IRModule has no source model: its own default build is the reference
        expected = default(m.inputs)
    report.default_ms = default.time(m.inputs, repeat=repeat).median_ms
    seconds["default build"] = time.perf_counter() - t

    # One database for the run: the graph pass prices with its records and every round tunes into it.
    tuning = TuningDatabase(work / "tuning" / target.kind.name)
    rounds: list[_Round] = []
    repeated: list[dict] = []  # the round that chose an earlier round's graph, if one did
    finish = 0.0  # seconds building, checking and timing the rounds' graphs
    for r in range(max(1, graph_rounds) if rewrite else 1):
        mod, rl_report = m.mod, None
        if rewrite:
            t = time.perf_counter()
            mod, rl_report = graph_stage(m.mod, target, tuning, policy, rewrite_steps, rewrite_seconds, seed,
                                         report.fast_math, report.channels_last)
            seconds["graph pass" + (f" {r + 1}" if r else "")] = time.perf_counter() - t
        elif report.fast_math:
            mod = lower_fast_math(mod)
        # (without rewriting there is one round, and nothing to compare with)
        same = next((i for i, c in enumerate(rounds) if tvm_ffi.structural_equal(c.mod, mod)), None)
        if same is not None:  # the refitted proxy chose the same graph: nothing new to tune or time
            repeated.append({"round": r + 1, "same_graph_as_round": same + 1})
            break
        t = time.perf_counter()
        database, tuned = tune_model(mod, target, tuning, trials_per_kernel=trials_per_kernel,
                                     trials_per_iter=8 if whole_model else min(8, trials_per_kernel),
                                     strategy=strategy, seed=seed,
                                     cost_model=cost_model_from_spec(cost_model, seed, target.kind.name),
                                     budget=budget, minutes=minutes, library=library, runner=tuning_runner)
        report.kernels_tuned += tuned.tasks
        report.trials_measured += tuned.measured
        report.kernels_from_library += len(tuned.from_library)
        report.search_errors.update(tuned.search_errors)
        seconds["tuning" + (f" {r + 1}" if r else "")] = time.perf_counter() - t
        t = time.perf_counter()
        executable = measure.build(mod, target, database)
        runner = measure.Runner(executable, target)
        outputs = runner(m.inputs)
        scale = measure.output_scale(expected)
        check = measure.compare(outputs, expected, rtol=rtol, atol=atol * scale)
        if not check.ok:
            raise MismatchError(f"{m.name}: the optimized module's output {check.worst_output} differs from the "
                                f"source model's by {check.max_abs_err:.3g} (rtol {rtol}, atol {atol} x {scale:.3g})")
        rounds.append(_Round(mod, database, executable, runner, check.max_abs_err, rl_report))
        finish += time.perf_counter() - t

    t = time.perf_counter()
    # Rounds timed together in interleaved rounds, so load on the machine falls on each alike.
    timings = measure.time_interleaved({str(i): c.runner for i, c in enumerate(rounds)}, m.inputs, repeat=repeat)
    for i, c in enumerate(rounds):
        c.tuned_ms = timings[str(i)].median_ms
    if graph_rounds > 1:
        report.graph_rounds = [{"round": i + 1, "rewrites": len(c.rl.applied) if c.rl else 0,
                                "tuned_ms": c.tuned_ms} for i, c in enumerate(rounds)] + repeated
    best = min(rounds, key=lambda c: c.tuned_ms)
    mod, database, executable = best.mod, best.database, best.executable
    if best.rl is not None:
        report.graph_rewrites, report.graph_reason = best.rl.applied, best.rl.reason
        report.graph_policy = best.rl.policy
    report.max_abs_err = best.max_abs_err
    report.optimized_ms = report.tuned_ms = best.tuned_ms
    rewritten = mod
    if report.tuned_ms > report.default_ms:
        # Never hand back something slower than the input's default build (few trials on tiny kernels can lose).
        report.kept_default, report.optimized_ms = True, report.default_ms
        mod, executable, database = m.mod, default_executable, None
    seconds["build + check + time"] = finish + time.perf_counter() - t
    report.seconds = {k: round(v, 1) for k, v in seconds.items()}
    work.mkdir(parents=True, exist_ok=True)
    (work / f"optimize_{m.name}.json").write_text(json.dumps(asdict(report) | {"speedup": report.speedup}, indent=1))
    return Optimized(mod, executable, target, database, m.inputs, report, rewritten, m.output_spec)
