"""Candidates that fail to build, crash, hang or compute the wrong thing are recorded as failures with their
reason, and tuning goes on (injected failures; see tvm_rl.tune.runner.failures)."""
import json
import resource
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import te, tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import RunnerInput
from tvm.support.tar import tar

from tvm_rl.tune.runner.failures import CheckedRunner, classify, summarize_error

N = 32


def kernel(kind: str = "good") -> tvm.IRModule:
    """An N x N matmul's signature (A, B -> C) computing the matmul, or failing on purpose."""
    a, b = te.placeholder((N, N), name="A"), te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    if kind == "good":
        c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    elif kind == "wrong":  # off by a factor of two
        c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j] * 2.0, axis=k), name="C")
    elif kind == "crash":  # kills the process that runs it
        c = te.compute((N, N), lambda i, j: a[i, j] + tirx.call_extern("int32", "abort").astype("float32"), name="C")
    elif kind == "hang":  # 100 s per element
        c = te.compute((N, N), lambda i, j: a[i, j] + tirx.call_extern("int32", "sleep", 100).astype("float32"),
                       name="C")
    else:
        raise ValueError(kind)
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.fixture(autouse=True)
def no_core_dumps():
    """The injected crash aborts a worker process: no core file for it (workers inherit this limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    yield
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, RunnerInput]:
    """Each kernel kind built (unscheduled) the way MetaSchedule's builder exports it, as a runner input."""
    out = {}
    args_info = ms.arg_info.ArgInfo.from_prim_func(kernel()["main"])
    for kind in ("good", "wrong", "crash", "hang"):
        path = tmp_path_factory.mktemp(kind) / "mod.tar"
        tvm.compile(kernel(kind), target="llvm").export_library(str(path), fcompile=tar)
        out[kind] = RunnerInput(str(path), "cpu", args_info)
    return out


KINDS = ["good", "wrong", "crash", "hang"]


@pytest.fixture(scope="module")
def local_runner():
    return ms.runner.LocalRunner(timeout_sec=5)


@pytest.mark.slow  # each hang waits out a 5 s timeout, each crash restarts a worker
def test_local_runner_reports_crashes_and_hangs_but_not_wrong_results(artifacts, local_runner):
    runner = local_runner
    results = dict(zip(KINDS, [f.result() for f in runner.run([artifacts[k] for k in KINDS])]))
    assert results["good"].error_msg is None and results["good"].run_secs
    assert results["wrong"].error_msg is None  # MetaSchedule times a wrong kernel like any other
    assert classify(None, results["crash"].error_msg)[0] == "run"
    assert "Subprocess terminated" in results["crash"].error_msg
    assert classify(None, results["hang"].error_msg)[0] == "timeout"


@pytest.mark.slow
def test_checked_runner_fails_wrong_crashing_and_hanging_candidates(artifacts, local_runner, caplog):
    runner = CheckedRunner([kernel()], inner=local_runner)
    assert runner.timeout_sec == 5  # the inner runner's
    results = dict(zip(KINDS, [f.result() for f in runner.run([artifacts[k] for k in KINDS])]))
    assert results["good"].error_msg is None and results["good"].run_secs
    kind, reason = classify(None, results["wrong"].error_msg)
    assert kind == "wrong" and "argument 2 differs from the unscheduled kernel's" in reason
    assert classify(None, results["crash"].error_msg)[0] == "run"
    assert classify(None, results["hang"].error_msg) == (
        "timeout", "CheckedRunner: timeout, killed after 5.0 s while checking its result")
    # A candidate no workload has the signature of is passed on unchecked, with a warning.
    other = CheckedRunner([tvm.IRModule({"main": te.create_prim_func([te.placeholder((2,), name="x")])})],
                          inner=local_runner)
    assert other.run([artifacts["wrong"]])[0].result().error_msg is None and "not checked" in caplog.text
    # With `only`, a workload outside it is a reference but its candidates pass on unchecked, without a warning.
    caplog.clear()
    unlisted = CheckedRunner([kernel()], inner=local_runner, only=other.workloads[next(iter(other.workloads))])
    assert unlisted.run([artifacts["wrong"]])[0].result().error_msg is None and unlisted.checked == 0
    assert "not checked" not in caplog.text
    listed = CheckedRunner([kernel()], inner=local_runner, only=[kernel()])
    assert classify(None, listed.run([artifacts["wrong"]])[0].result().error_msg)[0] == "wrong"


def test_error_summaries():
    assert summarize_error("LocalRunner: An exception occurred\nTraceback:\n  File x\nSubprocess terminated\n") == \
        "LocalRunner: An exception occurred ... Subprocess terminated"
    assert classify("PersistentBuilder: timeout, killed after 60.0 s", None)[0] == "timeout"
    assert classify("error: no such intrinsic", None) == ("build", "error: no such intrinsic")
    assert classify(None, None) is None


# Candidate position in the first measured batch -> what it is replaced by.
INJECT = {1: "build", 2: "crash", 3: "hang", 4: "wrong"}


@derived_object
class FaultyBuilder(PyBuilder):
    """Builds like `inner`, except that in the first batch it fails some candidates or swaps in bad kernels."""

    def __init__(self, inner) -> None:
        super().__init__()
        self.inner, self.batches = inner, 0

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        self.batches += 1
        plan = INJECT if self.batches == 1 else {}
        inputs = [BuilderInput(kernel(plan[i]), b.target, b.params) if plan.get(i) not in (None, "build") else b
                  for i, b in enumerate(build_inputs)]
        results = self.inner.build(inputs)
        return [BuilderResult(None, "injected: the compiler gave up") if plan.get(i) == "build" else r
                for i, r in enumerate(results)]


@pytest.mark.slow
def test_tuning_records_failures_with_reasons_and_goes_on(cpu, tmp_path):
    from tvm_rl.tune.agent import PPOConfig
    from tvm_rl.tune.search_strategy.ppo import PPOSearch
    from tvm_rl.tune.tasks import shared_builder, tune_workloads

    strategy = PPOSearch(config=PPOConfig(walks=8, max_evaluations=16), seed=0)
    db, report = tune_workloads([("matmul", kernel(), 1.0)], cpu, tmp_path, trials_per_kernel=10,
                                trials_per_iter=6, strategy=strategy, builder=FaultyBuilder(shared_builder()),
                                runner=ms.runner.LocalRunner(timeout_sec=5), check_results=True)
    assert report.tuned == ["matmul"] and report.measured == 10  # the budget was spent: tuning went on
    assert report.failures == {"build": 1, "run": 1, "timeout": 1, "wrong": 1}
    logged = [json.loads(line) for line in report.failure_log.read_text().splitlines()]
    assert sorted(f["kind"] for f in logged) == ["build", "run", "timeout", "wrong"]
    reasons = {f["kind"]: f["reason"] for f in logged}
    assert "injected: the compiler gave up" in reasons["build"] and "differs" in reasons["wrong"]
    assert all(f["task"] == "matmul" for f in logged)
    # The database holds every measured candidate; the failed ones with MetaSchedule's 1e10 s.
    secs = [float(np.mean(json.loads(line)[1][1]))
            for line in (Path(tmp_path) / "database_tuning_record.json").read_text().splitlines()]
    assert len(secs) == 10 and sum(s >= 1e9 for s in secs) == 4 and all(s < 1 for s in secs if s < 1e9)
    assert strategy._inst.log[0]["measure"] == 6 and len(strategy._inst.log) >= 2  # rounds after the failures
