"""Pricing a graph by its kernels' tuning records where the database has them (`graph.record_cost`)."""
import pytest

from tests.support import graph_examples as testing
from tvm_rl.graph import calibration, record_cost, roofline
from tvm_rl.graph.profiles import FusedKernel, fused_groups, graph_roofline_ms
from tvm_rl.tune import tune_model

NCHW, NHWC, W = (1, 8, 6, 6), (1, 6, 6, 8), (8, 8, 3, 3)


def tuned(kind: str, flops: float, ms: float, *shapes) -> calibration.TunedKernel:
    return calibration.TunedKernel(kind, flops, 0, ms, tuple(shapes))


def test_kernels_match_by_the_shapes_they_read_and_write_in_any_order():
    index = record_cost.RecordIndex([tuned("conv", 100.0, 0.5, NCHW, W, NCHW)])
    assert index.lookup(FusedKernel(90.0, 0, "conv", None, (W, NCHW, NCHW))).best_ms == 0.5
    # Another layout is another kernel: the same convolution in NHWC is not priced by the NCHW record.
    assert index.lookup(FusedKernel(100.0, 0, "conv_nhwc", None, (NHWC, W, NHWC))) is None
    # One more tensor read (a residual add fused in) is another kernel too.
    assert index.lookup(FusedKernel(100.0, 0, "conv", None, (NCHW, W, NCHW, NCHW))) is None
    # A tensor without a static shape is never matched; nor is a kernel without shapes.
    assert index.lookup(FusedKernel(100.0, 0, "conv", None, (NCHW, None, NCHW))) is None
    assert index.lookup(FusedKernel(100.0, 0, "conv", None, ())) is None


def test_of_workloads_sharing_shapes_the_same_kind_then_the_nearest_flops_is_taken():
    a = tuned("elementwise", 1000.0, 0.1, NCHW, NCHW)  # e.g. relu
    b = tuned("transpose", 1000.0, 0.2, NCHW, NCHW)
    c = tuned("elementwise", 3000.0, 0.3, NCHW, NCHW)  # e.g. a chain of three
    index = record_cost.RecordIndex([a, b, c])
    assert index.lookup(FusedKernel(1000.0, 0, "transpose", None, (NCHW, NCHW))) is b  # kind first
    assert index.lookup(FusedKernel(2900.0, 0, "elementwise", None, (NCHW, NCHW))) is c  # then FLOPs
    assert index.lookup(FusedKernel(1100.0, 0, "elementwise", None, (NCHW, NCHW))) is a


def test_an_unseen_kernel_is_priced_on_the_databases_scale_for_its_kind():
    hardware = roofline.Hardware(1e3, 1e3, 0.0, "test")  # 1 GFLOP and 1 GB a millisecond each
    kernels = [tuned("conv", 1e6, 2e-3, NCHW, W, NCHW), tuned("conv", 1e6, 4e-3, NHWC, W, NHWC),
               tuned("elementwise", 1e6, 10e-3, NCHW, NCHW)]
    cost = record_cost.RecordCost(record_cost.RecordIndex(kernels), hardware)
    assert cost.scale["conv"] == pytest.approx(3.0) and cost.scale[None] == pytest.approx(4.0)
    assert cost.roofline_ms(2e6, 0, "conv") == pytest.approx(2e-3 * 3.0)
    assert cost.roofline_ms(2e6, 0, "matmul") == pytest.approx(2e-3 * 4.0)  # no matmul: all
    empty = record_cost.RecordCost(record_cost.RecordIndex([]), hardware)
    assert empty.roofline_ms(2e6, 0, "conv") == pytest.approx(2e-3)


def test_fused_kernels_carry_the_shapes_of_what_they_read_and_write():
    mod = testing.dense_graph(n=4, c=32, o=16)
    shapes = sorted(record_cost.shape_key(k.shapes) for k in fused_groups(mod))
    # x [4, 32] @ W^T (+ b): W is folded into a constant [32, 16]; y [2, 4, 32] @ [32, 16].
    assert ((4, 16), (4, 32), (16,), (32, 16)) in shapes and ((2, 4, 16), (2, 4, 32), (32, 16)) in shapes


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory):
    """A database holding the kernels of `dense_graph(n=4, c=32, o=16)`."""
    from tvm_rl import measure

    folder = tmp_path_factory.mktemp("records")
    # random sampling: any records will do (evolutionary search costs a minute here)
    tune_model(testing.dense_graph(n=4, c=32, o=16), measure.host_cpu_target(), folder, trials_per_kernel=2,
               trials_per_iter=2, strategy="random")
    return folder


def test_a_tuned_graph_is_priced_by_its_records_and_an_unseen_kernel_by_the_roofline(cpu, tuned_db):
    tmp_path, mod = tuned_db, testing.dense_graph(n=4, c=32, o=16)
    hardware = roofline.default_hardware(cpu)
    cost = record_cost.RecordCost(record_cost.RecordIndex.of(tmp_path), hardware)
    priced = cost.price(mod)
    assert [k.source for k in priced] == ["record"] * len(priced) and cost.coverage(mod) == 1.0
    best = sorted(k.best_ms for k in calibration.tuned_kernels(tmp_path))
    assert sorted(k.ms for k in priced) == pytest.approx(best)
    # Other shapes: kernels the database has never seen, priced by the roofline on the database's scale.
    other = testing.dense_graph(n=3, c=32, o=16)
    assert cost.coverage(other) == 0.0
    assert cost(other) == pytest.approx(graph_roofline_ms(other, hardware) * cost.scale["matmul"])
    memoised = record_cost.record_cost(tmp_path, target=cpu)
    assert memoised(mod) == pytest.approx(sum(best))


def test_pricing_by_records_needs_a_database_folder(cpu):
    with pytest.raises(ValueError, match="database folder"):
        record_cost.RecordIndex.of(None)
    with pytest.raises(ValueError, match="hardware .* or the target"):
        record_cost.record_cost("somewhere")


def test_the_graph_benchmarks_price_by_records_when_asked(monkeypatch, cpu, tuned_db):
    import argparse
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    sys.modules.pop("graph_rl", None)
    import graph_rl

    ap = argparse.ArgumentParser()
    graph_rl.add_arm_args(ap)
    hardware, mod = roofline.default_hardware(cpu), testing.dense_graph(n=4, c=32, o=16)
    price, source = graph_rl.pricing_of(hardware, ap.parse_args([]))
    assert source == "proxy" and price()(mod) == pytest.approx(graph_roofline_ms(mod, hardware))
    price, source = graph_rl.pricing_of(hardware, ap.parse_args(["--price-records", str(tuned_db)]))
    assert str(tuned_db) in source
    assert price()(mod) == pytest.approx(sum(k.best_ms for k in calibration.tuned_kernels(tuned_db)))


def test_training_rewards_by_records_when_asked(tuned_db):
    from tvm_rl import models
    from tvm_rl.graph.train import TrainConfig, make_env

    config = TrainConfig(models=("bert",), size="tiny", price_records=str(tuned_db))
    env = make_env("bert", config)
    assert isinstance(env.cost.fn, record_cost.RecordCost)
    assert len(env.cost.fn.index) == len(calibration.tuned_kernels(tuned_db))
    mod = models.load("bert", "tiny").mod
    assert env.cost(mod) == pytest.approx(record_cost.RecordCost(env.cost.fn.index, env.hardware)(mod))
    assert not isinstance(getattr(make_env("bert", TrainConfig(models=("bert",), size="tiny")).cost, "fn", None),
                          record_cost.RecordCost)  # without it, the roofline


def _subtract_graph():
    """dense_graph(n=4, c=32, o=16) with the bias subtracted: its kernels have the same shapes, not the same code."""
    import numpy as np
    from tvm import relax

    R, rng = relax.op, np.random.default_rng(0)

    def body(emit, x, y):
        w = emit(R.permute_dims(testing.rand(rng, 16, 32), [1, 0]))
        return [emit(R.subtract(emit(R.matmul(x, w)), testing.rand(rng, 16))),
                emit(R.matmul(y, testing.rand(rng, 32, 16)))]

    return testing.module(body, [(4, 32), (2, 4, 32)])


def test_lowered_pricing_matches_kernels_exactly_where_shapes_alone_do_not(cpu, tuned_db):
    hardware, mod = roofline.default_hardware(cpu), testing.dense_graph(n=4, c=32, o=16)
    exact = record_cost.LoweredRecordCost(tuned_db, hardware, cpu)
    priced = exact.price(mod)
    assert [k.source for k in priced] == ["record"] * len(priced)
    assert sum(k.ms for k in priced) == pytest.approx(sum(k.best_ms for k in calibration.tuned_kernels(tuned_db)))
    # Subtracting the bias: the same shapes, another kernel. Shapes alone take it for the tuned one; lowering does not.
    other = _subtract_graph()
    by_shapes = record_cost.RecordCost(record_cost.RecordIndex.of(tuned_db), hardware).price(other)
    assert sorted(k.source for k in by_shapes) == ["record", "record"]
    assert sorted(k.source for k in exact.price(other)) == ["record", "roofline"]  # the plain matmul is the same
