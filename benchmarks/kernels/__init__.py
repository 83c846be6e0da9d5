"""Kernels for `benchmarks.kernel_ceiling`: the workloads as Relax modules, and hand-written TIR schedules."""
