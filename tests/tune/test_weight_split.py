"""WeightSplitParallel: a kernel whose weight exceeds L2 is not parallelised over output rows or pixels."""
import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Trace

from tests.support.kernels import relax_conv_nhwc
from tvm_rl.tune import extract_tasks
from tvm_rl.tune import weight_split as ws
from tvm_rl.tune.design_space import space_generator
from tvm_rl.tune.weight_split import large_weight, replicates_weight

H, C, F = 6, 16, 32  # 6x6 image, 16 -> 32 channels: the weight is 32 * 3 * 3 * 16 * 4 = 18,432 bytes
WEIGHT_BYTES = F * 3 * 3 * C * 4


def conv_task(cpu, size: int = H) -> tvm.IRModule:
    """`relax_conv_nhwc`'s convolution as `extract_tasks` gives it (the constant weight layout-free)."""
    (task,) = [t for t in extract_tasks(relax_conv_nhwc(size, C, F), cpu) if "conv2d" in t.task_name]
    return task.dispatched[0]


def hand_schedule(mod: tvm.IRModule, parallel_axis: int) -> tvm.s_tir.Schedule:
    """The conv's loop `parallel_axis` (0 n, 1 rows, 2 columns, 3 output channels) made parallel."""
    sch = tvm.s_tir.Schedule(mod)
    block = sch.get_sblock("conv2d_nhwc")
    sch.parallel(sch.get_loops(block)[parallel_axis])
    return sch


def test_a_weight_larger_than_l2_is_guarded_on_its_weight_independent_axes(cpu):
    guard = large_weight(conv_task(cpu), WEIGHT_BYTES - 1)
    assert guard == ws.LargeWeight("conv2d_nhwc", (1, 2), WEIGHT_BYTES)  # rows and columns; n has extent 1


def test_a_weight_that_fits_l2_or_an_unknown_l2_is_not_guarded(cpu):
    assert large_weight(conv_task(cpu), WEIGHT_BYTES) is None
    assert large_weight(conv_task(cpu), None) is None


def test_nothing_is_guarded_when_the_activations_do_not_fit_l2_either(cpu):
    # 40x40x16 padded input: 42 * 42 * 16 * 4 = 112,896 bytes; the weight is smaller.  Splitting channels would then
    # replicate the input instead, so the space is left alone.
    assert large_weight(conv_task(cpu, size=40), WEIGHT_BYTES - 1) is None
    assert large_weight(conv_task(cpu, size=40), 100_000) is None
    assert large_weight(conv_task(cpu, size=40), 112_896) is None  # fits: the weight is no larger


def test_a_workload_without_a_layout_free_weight_is_not_guarded(cpu):
    mod = conv_task(cpu)
    bare = tvm.IRModule({"main": mod["main"].without_attr("layout_free_buffers")})
    assert large_weight(bare, 1) is None


def test_parallel_rows_replicate_the_weight_and_parallel_channels_do_not(cpu):
    mod = conv_task(cpu)
    guard = large_weight(mod, WEIGHT_BYTES - 1)
    assert replicates_weight(hand_schedule(mod, 1).mod["main"], guard)
    assert replicates_weight(hand_schedule(mod, 2).mod["main"], guard)
    assert not replicates_weight(hand_schedule(mod, 3).mod["main"], guard)
    assert not replicates_weight(tvm.s_tir.Schedule(mod).mod["main"], guard)  # no parallel loop at all


def sampled(mod: tvm.IRModule, cpu, generator, n: int) -> list[tuple[bool, tvm.s_tir.Schedule]]:
    """`n` random schedules of `generator`'s first space: (whether every postprocessor accepted it, schedule)."""
    context = ms.TuneContext(mod=mod, target=cpu, space_generator=generator, task_name="t", rand_state=0)
    space = context.generate_design_space()[0]
    out = []
    for seed in range(n):
        sch = tvm.s_tir.Schedule(mod, seed=1000 + 7919 * seed)
        Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        out.append((all(p.apply(sch) for p in context.space_generator.postprocs), sch))
    return out


def test_the_space_rejects_exactly_the_schedules_that_replicate_a_large_weight(cpu, monkeypatch):
    monkeypatch.setenv(ws.L2_ENV, str(WEIGHT_BYTES - 1))
    mod = conv_task(cpu)
    guard = large_weight(mod, WEIGHT_BYTES - 1)
    stock = sampled(mod, cpu, space_generator(cpu, mod=mod, split_weights=False), 24)
    split = sampled(mod, cpu, space_generator(cpu, mod=mod, split_weights=True), 24)
    replicating = [replicates_weight(s.mod["main"], guard) for ok, s in stock]
    assert all(ok for ok, _ in stock) and any(replicating) and not all(replicating)
    assert [ok for ok, _ in split] == [not r for r in replicating]


def test_the_space_adds_the_postprocessor_only_where_it_has_work(cpu, monkeypatch):
    def has_it(mod, split):
        # MetaSchedule hands back a Python postprocessor as its FFI base class: counted, not type-checked.
        generator = space_generator(cpu, mod=mod, split_weights=split)
        return len(generator.postprocs) == len(ms.Postproc.create("llvm")) + 1

    mod = conv_task(cpu)
    monkeypatch.setenv(ws.L2_ENV, str(WEIGHT_BYTES - 1))
    assert has_it(mod, True) and not has_it(mod, False)
    monkeypatch.setenv(ws.L2_ENV, str(WEIGHT_BYTES))
    assert not has_it(mod, True)


def test_l2_comes_from_the_environment_or_linux(monkeypatch, tmp_path):
    monkeypatch.setenv(ws.L2_ENV, "12345")
    assert ws.l2_bytes() == 12345
    monkeypatch.setenv(ws.L2_ENV, "1M")
    with pytest.raises(ValueError, match="TVM_RL_L2_BYTES must be a number of bytes"):
        ws.l2_bytes()
    monkeypatch.delenv(ws.L2_ENV)
    for name, level, kind, size in [("index0", 1, "Data", "48K"), ("index1", 1, "Instruction", "32K"),
                                    ("index2", 2, "Unified", "1024K"), ("index3", 3, "Unified", "32768K")]:
        (tmp_path / name).mkdir()
        for field, value in (("level", level), ("type", kind), ("size", size)):
            (tmp_path / name / field).write_text(f"{value}\n")
    monkeypatch.setattr(ws, "_CPU_CACHES", tmp_path)
    assert ws.l2_bytes() == 1 << 20
    monkeypatch.setattr(ws, "_CPU_CACHES", tmp_path / "absent")
    assert ws.l2_bytes() is None


def test_an_elementwise_kernel_reading_a_large_constant_is_not_guarded(cpu):
    # x[4, 1] * w[1, 4096]: w is a layout-free constant larger than this L2 and the rows do not index it, but
    # nothing is reduced, so no weight is streamed again per row.
    w = np.random.default_rng(0).standard_normal((1, 4096)).astype("float32")
    x = relax.Var("x", relax.TensorType((4, 1), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.multiply(x, relax.const(w)))
        bb.emit_func_output(y)
    (task,) = extract_tasks(bb.get(), cpu)
    mod = task.dispatched[0]
    assert list(mod["main"].attrs["layout_free_buffers"])  # the constant is marked, as a weight is
    assert large_weight(mod, 1000) is None
