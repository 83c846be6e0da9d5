"""Graph cost functions: what the search and the environment minimise. Every cost function maps an IRModule
to milliseconds.

Three estimates of a Relax module's latency, from slow and true to fast and rough:
  (b) `end_to_end_ms`: build the module and time it (the harness's median);
  (a) `KernelCostCache`: the sum over the lowered kernels of calls x latency, each distinct kernel
      (structural hash of the scheduled PrimFunc + target + database) timed alone once and kept on disk
      as JSON lines, so later runs and other graphs sharing the kernel reuse it;
  (c) rooflines (`roofline`) over kernel profiles (`profiles`): over the lowered TIR kernels, or over the
      kernels `fusion` predicts from the Relax bindings (milliseconds: what the environment prices with).
`compare_costs` says how far (a) and (c) are from (b). Cost functions that tune kernels before timing them
live beside the benchmarks (`benchmarks/graphs/tuned_cost.py`): the graph half never imports the tuner.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import tvm

from .. import measure
from ..database import DatabaseLike, TuningDatabase, as_database
from ..errors import BuildError
from ..paths import cache_dir
from .fingerprint import module_key
from .profiles import KernelProfile, graph_roofline_ms, profiles_of
from .roofline import Roofline, default_hardware

CostFn = Callable[[tvm.IRModule], float]
# (before, after) -> their end-to-end medians in ms, measured side by side: what the never-slower guards use.
PairMeasure = Callable[[tvm.IRModule, tvm.IRModule], tuple[float, float]]


def default_cache_dir() -> Path:
    """Where measured kernel latencies are kept: `$TVM_RL_KERNEL_COST_DIR`, else `<cache_dir()>/kernel_cost`
    (a user cache folder, never inside the installed package)."""
    own = os.environ.get("TVM_RL_KERNEL_COST_DIR")
    return Path(own) if own else cache_dir() / "kernel_cost"


# ------------------------------------------------------------------------------------ measured costs


def database_tag(database: DatabaseLike) -> str:
    """The part of a cache key that says which kernels were used: "untuned", or a JSON database's path
    (`TuningDatabase.tag`)."""
    if database is None:
        return "untuned"
    folder = TuningDatabase.of(database)
    if folder is None:
        raise ValueError(f"cannot name database {type(database).__name__} in a cache key; pass database_tag=...")
    return folder.tag


@dataclass(frozen=True)
class KernelCost:
    """One kernel's measured median latency (ms), its call count, and whether the cache already had it."""

    profile: KernelProfile
    latency_ms: float
    cached: bool

    @property
    def total_ms(self) -> float:
        return self.profile.calls * self.latency_ms


class KernelCostCache:
    """Per-kernel latency, measured once per (kernel, target, database) and kept on disk across runs.

    The cost of a module is sum(calls x latency) over its lowered kernels. Keys are the structural hash of
    the kernel *after* the database's schedule is applied, the target's JSON and `database_tag(database)`,
    so a tuned and an untuned kernel never share an entry and one database serves every graph alike.
    Entries are JSON lines in `directory/kernels.jsonl` (appended as measured; unreadable lines skipped).
    """

    def __init__(self, target: tvm.target.Target | str, database: DatabaseLike = None,
                 directory: str | Path | None = None, tag: str | None = None, repeat: int = 10):
        self.target = measure.parse_target(target)
        self.database = as_database(database)  # opened once, not once per module priced
        self.tag = tag or database_tag(database)
        self.repeat = repeat
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.path = self.directory / "kernels.jsonl"
        self.entries: dict[str, dict] = {}
        self.hits = self.misses = 0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    self.entries[entry["key"]] = entry
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line cut short by a killed run: re-measure that kernel when needed

    def key(self, structural_hash: int) -> str:
        return f"{structural_hash}|{self.target}|{self.tag}"

    def kernel_costs(self, mod: tvm.IRModule) -> list[KernelCost]:
        """Every kernel of `mod` with its latency, timing only those not in the cache."""
        lowered = measure.kernel_stage(mod, self.target, self.database)
        profiles = profiles_of(lowered)
        out = []
        rng = np.random.default_rng(0)
        for profile in profiles:
            key = self.key(profile.structural_hash)
            entry = self.entries.get(key)
            if entry is not None:
                self.hits += 1
                out.append(KernelCost(profile, float(entry["median_ms"]), True))
                continue
            self.misses += 1
            timing = _time_kernel(lowered, profile.name, self.target, rng, self.repeat)
            entry = {"key": key, "structural_hash": profile.structural_hash, "target": str(self.target),
                     "database": self.tag, "name": profile.name, "flops": profile.flops,
                     "nbytes": profile.nbytes, **timing.as_dict()}
            self._append(entry)
            out.append(KernelCost(profile, timing.median_ms, False))
        return out

    def __call__(self, mod: tvm.IRModule) -> float:
        """sum(calls x latency) over `mod`'s kernels, in ms."""
        return sum(k.total_ms for k in self.kernel_costs(mod))

    def _append(self, entry: dict) -> None:
        self.entries[entry["key"]] = entry
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:  # one write per line: concurrent runs interleave whole lines
            f.write(json.dumps(entry) + "\n")


def _time_kernel(lowered: tvm.IRModule, name: str, target: tvm.target.Target, rng: np.random.Generator,
                 repeat: int) -> measure.Timing:
    """One kernel built alone and timed on random inputs (as `measure.time_kernels` does for all)."""
    func = lowered[name]
    device = measure.device_for(target)
    try:
        lib = tvm.compile(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target=target)
    except Exception as err:
        raise BuildError(f"kernel {name} failed to build for {target.kind.name}: {err}") from err
    args = measure.random_args(func, device, rng)
    runnable = lib.jit()
    runnable[name](*args)  # warm-up
    evaluator = runnable.time_evaluator(name, device, number=1, repeat=repeat)
    return measure.summarize([s * 1e3 for s in evaluator(*args).results])


def end_to_end_ms(mod: tvm.IRModule, target: tvm.target.Target | str, inputs: Sequence[np.ndarray],
                  database: DatabaseLike = None, repeat: int = 10) -> measure.Timing:
    """Build `mod` (with `database`'s tuned kernels) and time it on `inputs`: the harness's median."""
    target = measure.parse_target(target)
    runner = measure.Runner(measure.build(mod, target, database), target)
    return runner.time(inputs, repeat=repeat)


# -------------------------------------------------------------------------------------- cost functions


class Memo:
    """A cost function memoised by graph key (search and the environment revisit graphs).

    Only keys and values are kept (the last `max_graphs`, least recently used dropped first), never the
    graphs: on full-size models every candidate carries its own folded weights, and a memo that held its
    graphs grew past 15 GB over one search. Keys are `module_key`'s 64-bit hashes; two different graphs
    sharing one (odds of about 1e-10 over a search's 1e4 graphs) would share a cost, and the measured
    guards (`search.confirm`, `RLRewritePass(confirm=True)`) still stand between that and the user."""

    def __init__(self, fn: CostFn, max_graphs: int = 100_000):
        self.fn = fn
        self.max_graphs = max_graphs
        self.values: OrderedDict[int, float] = OrderedDict()
        self.calls = 0

    def __call__(self, mod: tvm.IRModule) -> float:
        key = module_key(mod)
        value = self.values.get(key)
        if value is not None:
            self.values.move_to_end(key)
            return value
        self.calls += 1
        value = self.values[key] = float(self.fn(mod))
        if len(self.values) > self.max_graphs:
            self.values.popitem(last=False)
        return value


def roofline_cost(hardware: Roofline) -> CostFn:
    """The fast proxy as a cost function: `graph_roofline_ms(mod, hardware)`, memoised."""
    return Memo(lambda mod: graph_roofline_ms(mod, hardware))


def kernel_sum_cost(cache: KernelCostCache) -> CostFn:
    """The cached per-kernel sum as a cost function, memoised."""
    return Memo(cache)


def end_to_end_cost(target: tvm.target.Target | str, inputs: Sequence[np.ndarray], database: DatabaseLike = None,
                    repeat: int = 10) -> CostFn:
    """The measured end-to-end median as a cost function, memoised."""
    database = as_database(database)
    return Memo(lambda mod: end_to_end_ms(mod, target, inputs, database, repeat).median_ms)


def pair_measure(target: tvm.target.Target | str, inputs: Sequence[np.ndarray] | None = None,
                 database: DatabaseLike = None, repeat: int = 10,
                 tune: Callable[[tvm.IRModule], DatabaseLike] | None = None) -> PairMeasure:
    """(before, after) -> end-to-end medians, both built with the same schedules and timed in alternating rounds.

    Measured apart, the two sides of a guard see different load and machine state, enough to pass a slower
    graph as faster. `inputs`: default `verify.random_inputs(before)`. `tune(mod) ->
    database`, when given, tunes each side's kernels first and builds with the database it returns.
    """
    target = measure.parse_target(target)
    database = as_database(database)

    def measure_both(before: tvm.IRModule, after: tvm.IRModule) -> tuple[float, float]:
        from .verify import random_inputs

        runners = {}
        for key, mod in (("before", before), ("after", after)):
            db = tune(mod) if tune is not None else database
            runners[key] = measure.Runner(measure.build(mod, target, db), target)
        timings = measure.time_interleaved(runners, random_inputs(before) if inputs is None else inputs,
                                           repeat=repeat)
        return timings["before"].median_ms, timings["after"].median_ms

    return measure_both



# ------------------------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class CostComparison:
    """The estimates of one module's latency (ms) and their relative errors against end-to-end."""

    end_to_end_ms: float
    kernel_sum_ms: float
    kernel_roofline_ms: float
    graph_roofline_ms: float
    hardware: Roofline

    @staticmethod
    def rel(estimate: float, truth: float) -> float:
        return (estimate - truth) / truth

    def errors(self) -> dict[str, float]:
        return {"kernel_sum": self.rel(self.kernel_sum_ms, self.end_to_end_ms),
                "kernel_roofline": self.rel(self.kernel_roofline_ms, self.end_to_end_ms),
                "graph_roofline": self.rel(self.graph_roofline_ms, self.end_to_end_ms)}

    def as_dict(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "hardware"}, "hardware": self.hardware.as_dict(),
                "rel_error": self.errors()}


def compare_costs(mod: tvm.IRModule, target: tvm.target.Target | str, inputs: Sequence[np.ndarray],
                  cache: KernelCostCache, hardware: Roofline | None = None, repeat: int = 10) -> CostComparison:
    """All estimates of `mod`'s latency on `target` with `cache`'s database, against the measured median.

    Relative errors are (estimate - end-to-end) / end-to-end: negative means the estimate is too low.
    """
    hardware = hardware or default_hardware(target)
    e2e = end_to_end_ms(mod, cache.target, inputs, cache.database, repeat).median_ms
    kernels = cache.kernel_costs(mod)
    return CostComparison(e2e, sum(k.total_ms for k in kernels),
                          sum(k.profile.calls * hardware.time_ms(k.profile.flops, k.profile.nbytes,
                                                                 k.profile.kind) for k in kernels),
                          graph_roofline_ms(mod, hardware), hardware)
