"""The tuning design space: MetaSchedule's, with RewriteLayout skipped where it breaks the build (fused attention)."""
import numpy as np
import pytest
import tvm
from tvm import relax, te, topi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder.local_builder import default_build

from tvm_rl import measure
from tvm_rl.tune import design_space, extract_tasks, tasks, tune_model
from tvm_rl.tune.design_space import (
    intermediate_layout_free,
    packed_conv,
    packed_gemm,
    space_generator,
)
from tvm_rl.tune.intrin import preload_tensor_intrinsics
from tvm_rl.tune.runner.failures import _signature

G, S, D = 2, 8, 4


def attention_model() -> tuple[tvm.IRModule, np.ndarray]:
    """softmax(Q K^T / 2 + bias) V as one R.nn.attention over (G, S, 1, D) operands, and its constant bias."""
    bias = np.random.default_rng(0).standard_normal((1, 1, S, S)).astype("float32")
    params = [relax.Var(n, relax.TensorType([G, S, 1, D], "float32")) for n in "qkv"]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.attention(*params, relax.const(bias), scale=0.5))
        bb.emit_func_output(out)
    return bb.get(), bias


def attention_task(cpu) -> tvm.IRModule:
    (task,) = [t for t in extract_tasks(attention_model()[0], cpu) if "attention" in t.task_name]
    return task.dispatched[0]


def dense_task() -> tvm.IRModule:
    x, w = te.placeholder((16, 32), name="X"), te.placeholder((24, 32), name="W")
    return tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.dense(x, w)])})


def first_space(mod: tvm.IRModule, cpu, generator) -> tvm.s_tir.Schedule:
    """The first design space of `mod`, postprocessed (every postprocessor must accept it)."""
    preload_tensor_intrinsics()
    context = ms.TuneContext(mod=mod, target=cpu, space_generator=generator, task_name="t", rand_state=0)
    sch = context.generate_design_space()[0]
    sch.enter_postproc()
    assert all(p.apply(sch) for p in context.space_generator.postprocs)
    return sch


def test_fused_attention_marks_an_intermediate_layout_free(cpu):
    # TOPI marks the batch matmuls' second operand layout-free; fused, it is a reshape computed in the kernel.
    assert intermediate_layout_free(attention_task(cpu))
    assert intermediate_layout_free(dense_task()) == []  # a dense's weight is a parameter


def unmarked_attention_task(cpu) -> tvm.IRModule:
    """The attention kernel fused as Relax fuses it without marking the weights (as TopHub or a user gives it):
    TOPI marks an intermediate buffer layout-free."""
    passes = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
              relax.transform.FuseOps(), relax.transform.FuseTIR()]
    with cpu, tvm.transform.PassContext(opt_level=3):
        fused = tvm.transform.Sequential(passes)(attention_model()[0])
    (task,) = [t.dispatched[0] for t in ms.relax_integration.extract_tasks(fused, cpu) if "attention" in t.task_name]
    return task


def test_stock_postprocessors_break_fused_attention_and_the_guard_does_not(cpu):
    # Fused as Relax fuses it without marking the weights (a TIR workload as TopHub or a user gives it),
    # RewriteLayout follows the blocks' marks, intermediate included, and the build fails.
    task = unmarked_attention_task(cpu)
    stock = first_space(task, cpu, "post-order-apply")
    with pytest.raises(Exception, match="used before its definition"):
        default_build(stock.mod, cpu, None)
    # kernel_stage lists the weights (AttachAttrLayoutFreeBuffers): RewriteLayout then packs only those.
    assert list(attention_task(cpu)["main"].attrs["layout_free_buffers"]) == [3]
    default_build(first_space(attention_task(cpu), cpu, "post-order-apply").mod, cpu, None)
    task = attention_task(cpu)
    guarded = first_space(task, cpu, space_generator(cpu))
    assert "transform_layout" not in str(guarded.trace)
    default_build(guarded.mod, cpu, None)


def test_the_guard_keeps_the_layout_rewrite_of_a_weight(cpu):
    sch = first_space(dense_task(), cpu, space_generator(cpu))
    assert "transform_layout" in str(sch.trace)


def test_a_workload_that_needs_no_guard_keeps_metaschedules_own_postprocessor(cpu):
    # The guard is Python, run for every sampled candidate; given the workload, it is used only where needed.
    dense = dense_task()
    own = space_generator(cpu, mod=dense)
    assert isinstance(own.postprocs[-1], ms.postproc.RewriteLayout)
    assert "transform_layout" in str(first_space(dense, cpu, own).trace)
    task = unmarked_attention_task(cpu)
    guarded = space_generator(cpu, mod=task)
    assert not isinstance(guarded.postprocs[-1], ms.postproc.RewriteLayout)  # the guard, in Python
    assert "transform_layout" not in str(first_space(task, cpu, guarded).trace)
    default_build(first_space(task, cpu, guarded).mod, cpu, None)


def test_gpu_targets_keep_metaschedules_space():
    assert space_generator(tvm.target.Target({"kind": "cuda", "arch": "sm_90"})) == "post-order-apply"


def test_fused_attention_candidates_are_checked_and_others_are_not(cpu, tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(tasks.ms, "tune_tasks", lambda **kw: seen.update(kw))  # what would be tuned, not tuning
    mod = attention_model()[0]
    tune_model(mod, cpu, tmp_path, trials_per_kernel=2)
    runner = seen["runner"]._inst
    (task,) = [t.dispatched[0] for t in extract_tasks(mod, cpu) if "attention" in t.task_name]
    assert runner.only == {_signature(ms.arg_info.ArgInfo.from_prim_func(task["main"]))}


@pytest.mark.slow
def test_fused_attention_is_tuned_and_still_computes_attention(cpu, tmp_path):
    mod, bias = attention_model()
    # Random schedules (replayed from the seed, so the same ones each run) rather than the evolutionary default.
    db, report = tune_model(mod, cpu, tmp_path, trials_per_kernel=8, trials_per_iter=8, strategy="random",
                            op_filter="attention")
    # Every candidate builds now; those that compute something else are caught as wrong and never timed.
    assert report.failures["build"] == 0
    assert any(float(r.run_secs[0]) < 1e9 for r in db.get_all_tuning_records())
    q, k, v = (np.random.default_rng(i).standard_normal((G, S, 1, D)).astype("float32") for i in range(3))
    out = measure.Runner(measure.build(mod, cpu, database=db), cpu)([q, k, v])
    scores = np.einsum("gqd,gkd->gqk", q[:, :, 0], k[:, :, 0]) * 0.5 + bias[0]
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    expected = np.einsum("gqk,gkd->gqd", weights, v[:, :, 0])[:, :, None]
    measure.assert_close(out, [expected])


def _matmul_and_conv(cpu) -> dict[str, tvm.IRModule]:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 32), "float32"))
    img = relax.Var("img", relax.TensorType((1, 8, 10, 10), "float32"))
    w, k = relax.const(np.ones((32, 24), "float32")), relax.const(np.ones((8, 8, 3, 3), "float32"))
    with bb.function("main", [x, img]):
        with bb.dataflow():
            a = bb.emit(relax.op.matmul(x, w))
            c = bb.emit(relax.op.nn.conv2d(img, k, padding=1))
            out = bb.emit_output(relax.Tuple([a, c]))
        bb.emit_func_output(out)
    return {t.task_name.rstrip("0123456789"): t.dispatched[0] for t in extract_tasks(bb.get(), cpu)}


def _tile_levels(mod: tvm.IRModule, cpu, **kwargs) -> set[int]:
    sch = first_space(mod, cpu, space_generator(cpu, mod=mod, **kwargs))
    return {len(i.outputs) for i in sch.trace.insts if i.kind.name == "SamplePerfectTile"}


def test_a_gemm_with_a_constant_weight_is_tiled_ssrs_and_a_conv_keeps_the_default(cpu):
    kernels = _matmul_and_conv(cpu)
    assert packed_gemm(kernels["matmul"]) and not packed_gemm(kernels["conv2d"])
    assert _tile_levels(kernels["matmul"], cpu) == {3}  # S, S, R, S: spatial loops in three levels, k whole
    assert _tile_levels(kernels["conv2d"], cpu) == {4, 2}  # S, S, R, S, R, S
    assert not packed_gemm(attention_task(cpu))  # several reductions: the default tiling
    unmarked = tvm.IRModule({"main": kernels["matmul"]["main"].without_attr("layout_free_buffers")})
    assert not packed_gemm(unmarked)  # nothing for RewriteLayout to pack


def test_a_pointwise_conv_is_tiled_like_a_packed_gemm_only_when_asked(cpu):
    kernels = _matmul_and_conv(cpu)
    pointwise = _conv_bias_relu6(cpu)
    assert packed_conv(pointwise) and not packed_conv(kernels["matmul"])
    assert not packed_conv(kernels["conv2d"])  # a 3x3 conv reduces over three long axes
    assert not packed_conv(attention_task(cpu))  # several reducing blocks
    unmarked = tvm.IRModule({"main": pointwise["main"].without_attr("layout_free_buffers")})
    assert not packed_conv(unmarked)
    assert _tile_levels(pointwise, cpu, conv_ssrs=True) == {3}  # S, S, R, S
    with design_space.conv_tiling(True):
        assert design_space.CONV_SSRS and _tile_levels(pointwise, cpu) == {3}
        assert _tile_levels(kernels["conv2d"], cpu) == {4, 2}
    assert not design_space.CONV_SSRS and _tile_levels(pointwise, cpu) == {4, 2}
    assert _tile_levels(kernels["matmul"], cpu, conv_ssrs=True) == {3}


def _conv_bias_relu6(cpu, epilogue: bool = True) -> tvm.IRModule:
    """A 1x1 conv (+ bias + ReLU6 when `epilogue`), fused as `kernel_stage` fuses it."""
    rng = np.random.default_rng(0)
    img = relax.Var("img", relax.TensorType((1, 8, 6, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [img]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(img, relax.const(rng.standard_normal((16, 8, 1, 1)).astype("float32"))))
            if epilogue:
                y = bb.emit(relax.op.add(y, relax.const(rng.standard_normal((1, 16, 1, 1)).astype("float32"))))
                y = bb.emit(relax.op.clip(y, 0.0, 6.0))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    (task,) = [t.dispatched[0] for t in extract_tasks(bb.get(), cpu) if "conv2d" in t.task_name]
    return task


def _spaces(mod: tvm.IRModule, cpu, **kwargs) -> list[tvm.s_tir.Schedule]:
    preload_tensor_intrinsics()
    context = ms.TuneContext(mod=mod, target=cpu, space_generator=space_generator(cpu, mod=mod, **kwargs),
                             task_name="t", rand_state=0)
    return list(context.generate_design_space())


def _epilogue_in_tile(sch: tvm.s_tir.Schedule) -> bool:
    conv = next(b for b in sch.get_child_blocks(sch.get_sblock("root")) if "conv" in sch.get(b).name_hint)
    (epilogue,) = sch.get_consumers(conv)
    return sch.get_sref(sch.get_loops(epilogue)[0]).same_as(sch.get_sref(sch.get_loops(conv)[0]))


def test_every_cpu_space_computes_the_epilogue_inside_the_tile(cpu):
    mod = _conv_bias_relu6(cpu)
    stock = _spaces(mod, cpu, fuse_epilogue=False)
    assert not all(_epilogue_in_tile(s) for s in stock)  # MetaSchedule also offers the separate loop nest
    fused = _spaces(mod, cpu)
    assert fused and all(_epilogue_in_tile(s) for s in fused)
    assert len(fused) < len(stock)


def test_a_kernel_without_epilogue_keeps_every_space(cpu):
    mod = _conv_bias_relu6(cpu, epilogue=False)
    assert len(_spaces(mod, cpu)) == len(_spaces(mod, cpu, fuse_epilogue=False))


@pytest.mark.parametrize("conv_ssrs", [False, True])
def test_a_fused_epilogue_space_computes_what_the_kernel_computes(cpu, conv_ssrs):
    mod = _conv_bias_relu6(cpu)
    generator = space_generator(cpu, mod=mod, conv_ssrs=conv_ssrs)
    context = ms.TuneContext(mod=mod, target=cpu, space_generator=generator, task_name="t", rand_state=0)
    args = [np.random.default_rng(1).standard_normal([int(d) for d in a.shape]).astype("float32")
            for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    expected = _run(mod, cpu, args)
    for sch in context.generate_design_space():
        sch.enter_postproc()
        assert all(p.apply(sch) for p in context.space_generator.postprocs)
        np.testing.assert_allclose(_run(sch.mod, cpu, args), expected, rtol=1e-5, atol=1e-5)


def _run(mod: tvm.IRModule, cpu, args: list[np.ndarray]) -> np.ndarray:
    """The last argument (the output) after running `mod`'s main on `args`."""
    func = tvm.compile(mod, target=cpu)
    tensors = [tvm.runtime.tensor(a) for a in args]
    func["main"](*tensors)
    return tensors[-1].numpy()
