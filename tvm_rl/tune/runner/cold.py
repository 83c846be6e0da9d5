"""A local runner that times CPU kernels as they run inside a model: cold caches.

MetaSchedule's LocalRunner by default repeats a candidate until 100 ms have passed and reports the mean, so a
kernel's weights sit in the cache for all but the first call. Inside a model the kernels before it have evicted
them, and a kernel whose weights are larger than the core's L2 runs markedly slower there than it was measured.
This runner flushes every argument but the first (the activation the kernel before it just wrote, still cached)
before each of `repeat` single calls, as TVM's `cache_flush_cpu_non_first_arg` does for Ansor.
"""
from __future__ import annotations

import tvm
from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError

MEASURES = ("warm", "cold")  # what `runner_for` takes: MetaSchedule's default, or this module's
COLD_REPEAT = 7  # single calls per candidate; the record keeps each and `record_seconds` averages them


def cold_evaluator(target: tvm.target.Target, repeat: int = COLD_REPEAT) -> ms.runner.EvaluatorConfig:
    """Timing settings of a cold-cache measurement on `target`: `repeat` single calls, each after a cache flush on a
    CPU (a GPU has no such flush: there it is `repeat` single calls)."""
    if repeat < 1:
        raise ValueError(f"a measurement needs at least one call (got repeat={repeat})")
    return ms.runner.EvaluatorConfig(number=1, repeat=repeat, min_repeat_ms=0,
                                     enable_cpu_cache_flush=target.kind.name == "llvm")


def cold_runner(target: tvm.target.Target, repeat: int = COLD_REPEAT,
                timeout_sec: float = 30.0) -> ms.runner.LocalRunner:
    """MetaSchedule's LocalRunner with `cold_evaluator`'s settings."""
    return ms.runner.LocalRunner(timeout_sec=timeout_sec, evaluator_config=cold_evaluator(target, repeat))


def is_cold(runner: ms.Runner | str) -> bool:
    """Whether `runner` times candidates with the CPU cache flushed (records not comparable with warm ones)."""
    config = getattr(runner, "evaluator_config", None)
    return bool(config is not None and config.enable_cpu_cache_flush)


def runner_for(target: tvm.target.Target, measure: str) -> ms.Runner | str:
    """The local runner for `measure`: "warm" (MetaSchedule's default, "local") or "cold" (`cold_runner`, CPU
    targets only: a GPU has no cache flush)."""
    if measure not in MEASURES:
        raise TvmRlError(f"measure must be one of {', '.join(MEASURES)} (got {measure!r})")
    if measure == "warm":
        return "local"
    if target.kind.name != "llvm":
        raise TvmRlError(f"cold-cache measurement flushes a CPU's caches; a {target.kind.name} target measures warm")
    return cold_runner(target)


__all__ = ["COLD_REPEAT", "MEASURES", "cold_evaluator", "cold_runner", "is_cold", "runner_for"]
