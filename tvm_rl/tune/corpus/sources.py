"""Where a corpus's workloads come from: TopHub tasks and zoo models' kernels as one-PrimFunc `Workload`s.

`tophub_workloads` rebuilds TopHub's distinct tasks from topi (`tophub_logs` picks the logs for a target kind),
`zoo_workloads` takes the kernels of zoo models (those with a reduction, by default), and `distinct` keeps one
workload per structural hash under a unique folder-safe name (`safe_name`). `host_info` describes the machine a
corpus is measured on. `corpus.build` measures these workloads into a corpus folder.
"""
from __future__ import annotations

import os
import platform
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi

from ...errors import TvmRlError
from ...measure import is_gpu, parse_target
from ..tasks import extract_tasks


# Defined here, beside the first code that raises it; `corpus.build` and the rest of the package import it.
class CorpusError(TvmRlError):
    """A corpus folder or suite that cannot be used (another target's corpus, no workloads, a bad setting)."""


@dataclass(frozen=True)
class Workload:
    """One kernel to measure: a unique folder-safe `name`, where it came from, and its one-PrimFunc module."""

    name: str
    source: str  # "tophub:<log file>", "zoo:<model>-<size>" or anything a caller chooses
    mod: tvm.IRModule = field(compare=False, repr=False)

    @property
    def key(self) -> int:
        """Structural hash of `mod`, as `tune.tasks` keys database workloads."""
        return int(tvm_ffi.structural_hash(self.mod))


def safe_name(name: str) -> str:
    """`name` with every character but letters, digits, `_`, `-` and `.` replaced by `_` (a folder name)."""
    out = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".")
    return out or "workload"


def has_reduction(mod: tvm.IRModule) -> bool:
    """Whether the module's `main` has a block with a reduction axis (matmul, conv, pooling, softmax, norms):
    the kernels whose schedules matter. Element-wise and layout kernels have none."""
    from ..tir_blocks import blocks

    # IterVar.CommReduce
    return any(int(iv.iter_type) == 2 for block in blocks(mod["main"]) for iv in block.iter_vars)


def tophub_logs(target: tvm.target.Target, directory: str | Path | None = None, which: str = "target") -> list[Path]:
    """The TopHub logs for `target`'s kind (files named `<kind>_*.log`, e.g. llvm_v0.04.log), or every log when
    `which` is "all" (the workload shapes do not depend on the device they were tuned for)."""
    from ..tophub import ENV_VAR, tophub_dir

    folder = tophub_dir(directory)
    logs = sorted(folder.glob("*.log"))
    if which == "all":
        return logs
    if which != "target":
        raise CorpusError(f"TopHub logs {which!r}: choose 'target' (the target kind's logs) or 'all'")
    kind = target.kind.name
    mine = [p for p in logs if p.name.split("_")[0] == kind]
    if not mine:
        raise CorpusError(f"no TopHub log for target kind {kind!r} in {folder} (it holds "
                          f"{', '.join(p.name for p in logs)}; logs are named <kind>_v<version>.log). Take every "
                          f"log's workloads with --tophub-logs all, use --zoo instead, or point {ENV_VAR} at a "
                          f"folder with a {kind} log")
    return mine


def tophub_workloads(target: tvm.target.Target | str, directory: str | Path | None = None,
                     ops: Iterable[str] | None = None, which: str = "target",
                     max_tasks: int | None = None) -> list[Workload]:
    """TopHub's distinct workloads from the logs `tophub_logs` picks, each rebuilt from topi, in log order;
    with `max_tasks`, that many spread evenly over the list (which is sorted by op kind, then shape, so every
    kind keeps its share)."""
    from ..tophub import KNOWN_OPS, parse_log, tasks_from_records

    target = parse_target(target)
    ops = set(ops) if ops else None
    if ops is not None and ops - set(KNOWN_OPS):
        raise CorpusError(f"unknown TopHub op kind(s) {sorted(ops - set(KNOWN_OPS))}; known: {', '.join(KNOWN_OPS)}")
    out: list[tuple[str, str, Any]] = []
    for path in tophub_logs(target, directory, which):
        records = [r for r in parse_log(path).records if ops is None or r.op in ops]
        tasks = tasks_from_records(records)
        out += [(safe_name(t.name), f"tophub:{path.name}", t) for t in tasks]
    if max_tasks is not None and len(out) > max_tasks:
        if max_tasks < 1:
            raise CorpusError(f"max_tasks must be at least 1, got {max_tasks}")
        step = len(out) / max_tasks
        out = [out[int(i * step)] for i in range(max_tasks)]
    return [Workload(name, source, task.mod()) for name, source, task in out]


def zoo_workloads(target: tvm.target.Target | str, names: Sequence[str], size: str = "full",
                  kernels: str = "compute") -> list[Workload]:
    """The kernels of zoo models `names` at `size`, as `measure.build` looks them up for `target`: those with a
    reduction (`kernels="compute"`) or all of them ("all"). Names are `<model>-<size>.<kernel>`."""
    from ... import models

    if kernels not in ("compute", "all"):
        raise CorpusError(f"kernels {kernels!r}: choose 'compute' (kernels with a reduction) or 'all'")
    for name in names:  # every name checked before any model is built
        models.spec(name)
    if size not in models.SIZES:
        raise CorpusError(f"unknown zoo size {size!r}; choose one of {', '.join(models.SIZES)}")
    target = parse_target(target)
    out = []
    for name in names:
        model = models.load(name, size)
        for task in extract_tasks(model.mod, target):
            mod = task.dispatched[0]
            if kernels == "all" or has_reduction(mod):
                out.append(Workload(safe_name(f"{name}-{size}.{task.task_name}"), f"zoo:{name}-{size}", mod))
    return out


def distinct(workloads: Iterable[Workload]) -> list[Workload]:
    """The first workload of each structural hash, in order; a name used twice gets its hash appended."""
    seen: set[int] = set()
    names: set[str] = set()
    out = []
    for w in workloads:
        key = w.key
        if key in seen:
            continue
        seen.add(key)
        if w.name in names:
            w = Workload(f"{w.name}-{key & 0xFFFFFFFF:08x}", w.source, w.mod)
        names.add(w.name)
        out.append(w)
    return out


def host_info(target: tvm.target.Target | None = None) -> dict[str, Any]:
    """The machine the corpus is measured on: CPU (LLVM's name for it, its model name, cores), and the GPU."""
    info: dict[str, Any] = {"cpu": str(tvm.target.codegen.llvm_get_system_cpu()), "cpu_model": platform.processor(),
                            "logical_cores": os.cpu_count(), "machine": platform.machine(),
                            "system": platform.platform()}
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if models:
            info["cpu_model"] = models[0]
    except OSError:
        pass
    try:
        import psutil

        info["physical_cores"] = psutil.cpu_count(logical=False)
    except ImportError:
        pass
    if target is not None and is_gpu(target):
        dev = tvm.device(target.kind.name, 0)
        if dev.exist:
            info["gpu"] = str(dev.device_name)
    return info


__all__ = ["CorpusError", "Workload", "distinct", "has_reduction", "host_info", "safe_name", "tophub_logs",
           "tophub_workloads", "zoo_workloads"]
