"""Candidates that fail: why each one did (`FailureLog`), and an opt-in check of their results (`CheckedRunner`).

What MetaSchedule already does, and tvm-rl relies on: a candidate that fails to build, raises or crashes its
runner process, or runs past the runner's timeout comes back as a RunnerResult with an error message; the
task scheduler tells the search strategy (PPOSearch counts it as infinitely slow and never proposes it again),
the database records it with a run time of 1e10 s, and tuning goes on. What it does not do:

- keep the reason: the database holds only the 1e10. `FailureLog` (a measure callback) counts failures by
  kind and appends each reason to a JSON-lines file beside the database;
- check results: a candidate whose schedule computes something else is timed and recorded like any other.
  `CheckedRunner` wraps any runner and first runs each candidate once on seeded random inputs, in a worker
  process with a timeout, comparing every buffer with the unscheduled workload's (built for the CPU). A
  mismatch, crash or hang is a failure with its reason and is never timed; the rest go to the inner runner.
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerInput
from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture
from tvm.support.popen_pool import PopenPoolExecutor

logger = logging.getLogger(__name__)

KINDS = ("build", "run", "timeout", "wrong")
WRONG = "CheckedRunner: wrong result"


@dataclass(frozen=True)
class Failure:
    """One failed candidate: its task, the kind of failure (one of KINDS) and the reason in one line."""

    task: str
    kind: str
    reason: str


def classify(builder_error: str | None, runner_error: str | None) -> tuple[str, str] | None:
    """(kind, one-line reason) for a candidate's builder and runner errors; None if it succeeded."""
    if builder_error is None and runner_error is None:
        return None
    message = builder_error if builder_error is not None else runner_error
    if WRONG in message:
        kind = "wrong"
    elif "timeout" in message.lower():
        kind = "timeout"
    else:
        kind = "build" if builder_error is not None else "run"
    return kind, summarize_error(message)


def summarize_error(message: str, limit: int = 300) -> str:
    """The first line of a (multi-line, traceback-laden) error and its last, which usually says what broke."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    text = lines[0] if len(lines) == 1 or lines[-1] == lines[0] else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@derived_object
class FailureLog(PyMeasureCallback):
    """Counts failed candidates by kind and keeps why; with `path`, appends one JSON line per failure there
    (the database itself keeps only a run time of 1e10 s for them)."""

    def __init__(self, path: str | Path | None = None, task_names: Sequence[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.names = list(task_names or [])
        self.failures: list[Failure] = []
        self.measured = 0

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        task = self._task_name(task_scheduler, task_id)
        new = []
        for built, ran in zip(builder_results, runner_results):
            self.measured += 1
            verdict = classify(built.error_msg, ran.error_msg)
            if verdict is not None:
                new.append(Failure(task, *verdict))
        self.failures += new
        if new and self.path is not None:
            with open(self.path, "a") as out:
                for failure in new:
                    out.write(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S"), **asdict(failure)}) + "\n")

    def counts(self) -> Counter:
        """Failures per kind."""
        return Counter(f.kind for f in self.failures)

    def _task_name(self, task_scheduler, task_id: int) -> str:
        if task_id < len(self.names):
            return self.names[task_id]
        try:
            return str(task_scheduler.tasks_[task_id].ctx.task_name)
        except Exception:  # a scheduler without Python-visible tasks: the index still identifies it
            return f"task {task_id}"


# ------------------------------------------------------------------------------------------ result checks


def _signature(args_info) -> tuple:
    """A hashable (kind, dtype, shape) per argument, from ArgInfo objects or their JSON."""
    out = []
    for info in args_info:
        kind, dtype, shape = info.as_json() if hasattr(info, "as_json") else info
        out.append((str(kind), str(dtype), tuple(int(d) for d in shape)))
    return tuple(out)


def _random_arrays(signature: tuple, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for _, dtype, shape in signature:
        if dtype == "bool":
            arrays.append(rng.integers(0, 2, size=shape).astype(bool))
        elif dtype.startswith(("int", "uint")):
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))  # small: safe as indices too
        else:
            arrays.append(rng.uniform(-1, 1, size=shape).astype(dtype))
    return arrays


def _check_in_worker(artifact_path: str, device_type: str, initial: list[np.ndarray],
                     expected: list[list[np.ndarray]], rtol: float, atol: float) -> str | None:
    """Run a built candidate once on `initial` and compare every buffer with each of the `expected` sets;
    None if one matches, else what differs. Runs in a worker process (a crash or hang must not end tuning)."""
    rt_mod = tvm.runtime.load_module(artifact_path)
    device = tvm.runtime.device(device_type, 0)
    args = [tvm.runtime.tensor(x, device) for x in initial]
    rt_mod[rt_mod.entry_name](*args)
    device.sync()
    actual = [a.numpy().astype(np.float64) for a in args]  # float64: bool and int buffers compare too
    worst = None
    for reference in expected:
        for i, (a, e) in enumerate(zip(actual, reference)):
            e = e.astype(np.float64)
            if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
                err = float(np.nanmax(np.abs(a - e), initial=0.0))
                if worst is None or err < worst[1]:
                    worst = (i, err)
                break
        else:
            return None
    i, err = worst
    return (f"{WRONG}: argument {i} differs from the unscheduled kernel's by up to {err:.3g} "
            f"(rtol={rtol:g}, atol={atol:g})")


@derived_object
class CheckedRunner(PyRunner):
    """Runs `inner` (a Runner or "local") only on candidates whose outputs match the unscheduled workload's.

    `workloads` are the tasks' unscheduled modules (or PrimFuncs). A candidate is matched to the workloads
    with its argument shapes and dtypes and passes if its buffers after one run equal one of theirs (within
    rtol/atol) from the same seeded random start: a wrong kernel could only pass by computing exactly another
    task's function of the same signature. References are built for the CPU (LLVM) once per workload; the
    candidate runs on its own device (`RunnerInput.device_type`) on the local host, so a remote runner's
    device cannot be checked. A candidate of an unknown signature is passed on unchecked, with a warning.
    `timeout_sec` (default: the inner runner's) bounds the check's run. With `only`, just the candidates of
    those workloads' signatures are checked and the rest passed on silently (every workload still serves as a
    reference, so another task of the same signature cannot fail a right candidate).
    """

    def __init__(self, workloads: Sequence[tvm.IRModule | tirx.PrimFunc], inner: ms.Runner | str = "local",
                 rtol: float = 1e-3, atol: float = 1e-3, timeout_sec: float | None = None, seed: int = 0,
                 only: Sequence[tvm.IRModule | tirx.PrimFunc] | None = None) -> None:
        super().__init__()
        self.inner = ms.Runner.create(inner) if isinstance(inner, str) else inner
        # By default a hang is cut off when the inner runner would cut it off.
        timeout_sec = timeout_sec or getattr(self.inner, "timeout_sec", None) or 30.0
        self.rtol, self.atol, self.timeout_sec, self.seed = rtol, atol, float(timeout_sec), seed
        self.workloads: dict[tuple, list[tirx.PrimFunc]] = {}
        for workload in workloads:
            func = _prim_func(workload)
            key = _signature(ms.arg_info.ArgInfo.from_prim_func(func))
            self.workloads.setdefault(key, []).append(func)
        self.only = None if only is None else {
            _signature(ms.arg_info.ArgInfo.from_prim_func(_prim_func(w))) for w in only}
        self._references: dict[tuple, tuple[list[np.ndarray], list[list[np.ndarray]]]] = {}
        self._warned: set[tuple] = set()
        self._pool: PopenPoolExecutor | None = None
        self.checked = 0

    def run(self, runner_inputs: list[RunnerInput]) -> list:
        verdicts = [self._check(inp) for inp in runner_inputs]
        passed = [inp for inp, verdict in zip(runner_inputs, verdicts) if verdict is None]
        timed = iter(self.inner.run(passed) if passed else [])
        return [next(timed) if verdict is None else LocalRunnerFuture(error_message=verdict)
                for verdict in verdicts]

    def _check(self, inp: RunnerInput) -> str | None:
        key = _signature(inp.args_info)
        if self.only is not None and key not in self.only:
            return None
        if key not in self.workloads:
            if key not in self._warned:
                self._warned.add(key)
                logger.warning("CheckedRunner: no workload with arguments %s; such candidates are not checked", key)
            return None
        initial, expected = self._reference(key)
        future = self._executor().submit(_check_in_worker, str(inp.artifact_path), str(inp.device_type), initial,
                                         expected, self.rtol, self.atol)
        self.checked += 1
        try:
            return future.result()
        except TimeoutError:
            return f"CheckedRunner: timeout, killed after {self.timeout_sec} s while checking its result"
        except Exception as err:  # the worker raised, or died (a crash): the message says which
            return f"CheckedRunner: the candidate failed while checking its result\n{err}"

    def _reference(self, key: tuple) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """Seeded inputs for a signature and every buffer after each matching unscheduled workload ran."""
        if key not in self._references:
            initial = _random_arrays(key, np.random.default_rng(self.seed))
            expected = []
            for func in self.workloads[key]:
                lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
                args = [tvm.runtime.tensor(x.copy(), tvm.cpu()) for x in initial]
                lib["main"](*args)
                expected.append([a.numpy() for a in args])
            self._references[key] = (initial, expected)
        return self._references[key]

    def _executor(self) -> PopenPoolExecutor:
        if self._pool is None:
            self._pool = PopenPoolExecutor(max_workers=1, timeout=self.timeout_sec)
        return self._pool


def _prim_func(workload: tvm.IRModule | tirx.PrimFunc) -> tirx.PrimFunc:
    if isinstance(workload, tirx.PrimFunc):
        return workload
    funcs = [f for _, f in workload.functions.items() if isinstance(f, tirx.PrimFunc)]
    if len(funcs) != 1:
        raise ValueError(f"a workload must hold exactly one PrimFunc, this one has {len(funcs)}")
    return funcs[0]


__all__ = ["CheckedRunner", "Failure", "FailureLog", "KINDS", "classify", "summarize_error"]
