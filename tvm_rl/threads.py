"""TVM's CPU thread pool sized to the cores this process may run on.

TVM's runtime starts one worker thread per core as it guesses the cores: on x86 half the logical CPUs, assuming two
hyperthreads per core. On a CPU without simultaneous multithreading (most small cloud machines) that is half the
cores: on a 2-core machine every tuned kernel, and every candidate MetaSchedule measures, runs on one core while
PyTorch and ONNX Runtime use both. TVM reads `TVM_NUM_THREADS` once, when its thread pool first starts, and
subprocesses (MetaSchedule's runners) inherit it, so importing tvm_rl sets it when the user has not.
"""
from __future__ import annotations

import os

THREADS_ENV = "TVM_NUM_THREADS"
OMP_ENV = "OMP_NUM_THREADS"  # TVM's runtime reads it when TVM_NUM_THREADS is unset


def cpu_threads() -> int:
    """The physical cores this process may run on: its CPU affinity's size, at most the machine's physical cores
    (so a hyperthreaded CPU keeps one thread per core, as TVM intends)."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        allowed = os.cpu_count() or 1
    import psutil

    physical = psutil.cpu_count(logical=False) or allowed
    return max(1, min(allowed, physical))


def use_all_cores() -> int | None:
    """Set `TVM_NUM_THREADS` to `cpu_threads()` unless it or `OMP_NUM_THREADS` (which TVM also reads) is set
    already; returns the value set, or None when the user's is kept. Has no effect on a TVM thread pool that has
    already started."""
    if os.environ.get(THREADS_ENV) or os.environ.get(OMP_ENV):
        return None
    threads = cpu_threads()
    os.environ[THREADS_ENV] = str(threads)
    return threads
