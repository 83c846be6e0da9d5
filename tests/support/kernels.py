"""Small TVM workloads, and a driver of the search-strategy protocol, shared by the tuning tests."""
import tvm
import tvm_ffi
from tvm import te


def matmul(n: int = 64) -> tvm.IRModule:
    """An n x n x n float32 matmul as a PrimFunc `main`."""
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def relax_matmul(epilogue: str | None = "add") -> tvm.IRModule:
    """A Relax model: x[16, 32] @ w[32, 32], then y + y ("add"), relu(y) ("relu") or nothing (None): one kernel each
    way after fusion, the epilogue fused into the matmul's."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 32), "float32"))
    w = relax.Var("w", relax.TensorType((32, 32), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w))
            if epilogue == "add":
                y = bb.emit(relax.op.add(y, y))
            elif epilogue == "relu":
                y = bb.emit(relax.op.nn.relu(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def relax_conv_nhwc(size: int = 6, c_in: int = 16, c_out: int = 32) -> tvm.IRModule:
    """A Relax model: one channels-last 3x3 convolution (padding 1) of a size x size x c_in input by a constant
    c_out x 3 x 3 x c_in weight (OHWI), which `extract_tasks` marks layout-free."""
    import numpy as np
    from tvm import relax

    w = np.random.default_rng(0).standard_normal((c_out, 3, 3, c_in)).astype("float32")
    x = relax.Var("x", relax.TensorType((1, size, size, c_in), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, relax.const(w), padding=1, data_layout="NHWC",
                                                  kernel_layout="OHWI"))
        bb.emit_func_output(y)
    return bb.get()


def fake_corpus(path, target, sizes=(8, 16, 32), per_workload: int = 12, fail_every: int = 0):
    """A corpus folder (`tune.corpus` layout) without measuring: `per_workload` random schedules of an n^3
    matmul per size, each given a made-up run time that depends on its schedule (every `fail_every`-th one
    fails with 1e10 s). For tests of what reads a corpus: seconds instead of a measurement run."""
    import json

    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from tvm_rl.tune.corpus import Corpus
    from tvm_rl.tune.intrin import preload_tensor_intrinsics

    preload_tensor_intrinsics()
    corpus = Corpus(path)
    entries = []
    for n in sizes:
        mod, name = matmul(n), f"matmul{n}"
        ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             search_strategy=ms.search_strategy.ReplayTrace(), task_name=name, rand_state=n,
                             num_threads=1)
        ctx.pre_tuning(max_trials=per_workload, num_trials_per_iter=per_workload,
                       design_spaces=ctx.generate_design_space(), database=None, cost_model=None)
        candidates = ctx.generate_measure_candidates()
        ctx.post_tuning()
        db = corpus.database(name).open()
        workload = db.commit_workload(mod)
        for i, cand in enumerate(candidates):
            secs = 1e10 if fail_every and i % fail_every == fail_every - 1 else \
                1e-6 * n ** 3 / 64 * (1 + (tvm_ffi.structural_hash(cand.sch.mod) % 1000) / 250)
            db.commit_tuning_record(ms.database.TuningRecord(cand.sch.trace, workload, [secs], target,
                                                             cand.args_info))
        entries.append({"name": name, "source": "test", "structural_hash": str(tvm_ffi.structural_hash(mod)),
                        "records": len(candidates)})
    corpus.write_manifest({"format": "tvm-rl corpus", "version": 1, "target": json.loads(str(target)),
                           "target_kind": target.kind.name, "workloads": entries, "runs": []})
    return corpus


def fake_seconds(sch) -> float:
    """A deterministic stand-in for a measurement: a function of the schedule's structure."""
    return 1e-4 * (1 + (tvm_ffi.structural_hash(sch.mod) % 1000) / 1000)


def drive(strategy, ctx, trials: int, per_iter: int, seconds=fake_seconds):
    """Run the search-strategy protocol the way MetaSchedule's task scheduler does, with fake measurements."""
    from tvm.s_tir import meta_schedule as ms

    inst = strategy._inst
    inst._initialize_with_tune_context(ctx)
    inst.pre_tuning(trials, per_iter, ctx.generate_design_space(), None, None)
    batches = []
    while (cands := inst.generate_measure_candidates()) is not None:
        assert 0 < len(cands) <= per_iter
        results = [ms.runner.RunnerResult(run_secs=[seconds(c.sch)], error_msg=None) for c in cands]
        inst.notify_runner_results(cands, results)
        batches.append(cands)
    inst.post_tuning()
    return inst, batches


def fake_tuning_run(folder, target, times_by_size):
    """A tuning database folder whose n^3 matmuls got records of these made-up seconds, committed in this order
    (each record the unscheduled kernel's trace): for tests of what reads tuning curves."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tvm_rl.database import TuningDatabase

    database = TuningDatabase(folder).open()
    for n, times in times_by_size.items():
        mod = matmul(n)
        workload = database.commit_workload(mod)
        for seconds in times:
            database.commit_tuning_record(ms.database.TuningRecord(
                tvm.s_tir.Schedule(mod).trace, workload, [seconds], target,
                ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    return folder
