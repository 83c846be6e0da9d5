"""Graph cost: FLOP/byte counts, the fusion model, calibration, the on-disk kernel cache and the comparison."""
import json

import numpy as np
import pytest
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.errors import DatabaseTypeError
from tvm_rl.graph import cost, profiles, roofline

R = relax.op


def chain():
    """x[4, 8] @ W[8, 16] -> + b -> relu: one kernel after fusion."""
    rng = np.random.default_rng(0)

    def body(e, x):
        y = e(R.matmul(x, T.rand(rng, 8, 16)))
        return e(R.nn.relu(e(R.add(y, T.rand(rng, 16)))))

    return T.module(body, [(4, 8)])


def test_op_flops_and_bytes_from_shapes():
    ops = profiles.op_profiles(chain())
    assert [p.op for p in ops[:3]] == ["relax.matmul", "relax.add", "relax.nn.relu"]
    assert ops[0].flops == 2 * 4 * 16 * 8
    assert ops[0].nbytes == 4 * (4 * 8 + 8 * 16 + 4 * 16)
    conv = next(p for p in profiles.op_profiles(T.bn_graph(cin=3, cout=4, hw=6, k=3)) if p.op == "relax.nn.conv2d")
    assert conv.flops == 2 * (4 * 6 * 6) * (3 * 3 * 3)
    # batch_norm returns a tuple; its FLOPs are per element of the normalised tensor (it was priced at 0).
    bn = next(p for p in profiles.op_profiles(T.bn_graph(cin=3, cout=4, hw=6, k=3)) if p.op == "relax.nn.batch_norm")
    assert bn.flops == profiles._PER_ELEMENT["relax.nn.batch_norm"] * 4 * 6 * 6


def test_fusion_model_puts_epilogue_in_one_kernel_and_counts_only_its_boundary():
    groups = profiles.fused_groups(chain())
    assert len(groups) == 1
    flops, nbytes, kind, gemm, shapes = groups[0]
    assert kind == "matmul" and (gemm.batch, gemm.m, gemm.n, gemm.k) == (1, 4, 16, 8)
    assert flops == 2 * 4 * 16 * 8 + 2 * 4 * 16
    assert nbytes == 4 * (4 * 8 + 8 * 16 + 16 + 4 * 16)  # x, W, b in; the relu out; no intermediates
    assert sorted(shapes) == [(4, 8), (4, 16), (8, 16), (16,)]  # the same tensors, by shape


def test_kernel_profiles_count_the_lowered_kernels(cpu):
    kernels = profiles.kernel_profiles(chain(), cpu)
    assert sum(k.calls for k in kernels) >= 1
    assert sum(k.flops for k in kernels) >= 2 * 4 * 16 * 8


def test_calibrate_recovers_a_known_roofline():
    truth = roofline.Hardware(50.0, 10.0, 2.0)
    rng = np.random.default_rng(0)
    flops, nbytes = rng.uniform(1e4, 1e8, 40), rng.uniform(1e3, 1e7, 40)
    measured = [truth.time_ms(f, b) for f, b in zip(flops, nbytes)]
    hw = roofline.calibrate(flops, nbytes, measured)
    pred = np.array([hw.time_ms(f, b) for f, b in zip(flops, nbytes)])
    assert np.median(np.abs(pred / measured - 1)) < 0.1
    with pytest.raises(ValueError, match="positive"):
        roofline.calibrate([1.0], [1.0], [0.0])


def test_kernels_get_their_kinds_roofline():
    assert [roofline.op_kind(n) for n in ("fused_conv2d3_add1_relu1", "relax.matmul", "max_pool2d1", "layer_norm",
                                      "fused_reshape_add")] == ["conv", "matmul", "pool", "reduce", "elementwise"]
    slow, fast = roofline.Hardware(1.0, 1.0), roofline.Hardware(100.0, 100.0)
    rng = np.random.default_rng(1)
    kinds = ["conv"] * 10 + ["elementwise"] * 10
    flops, nbytes = rng.uniform(1e6, 1e8, 20), rng.uniform(1e5, 1e7, 20)
    measured = [(slow if k == "conv" else fast).time_ms(f, b) for k, f, b in zip(kinds, flops, nbytes)]
    model = roofline.calibrate_by_kind(kinds, flops, nbytes, measured)
    assert {k for k, _ in model.per_kind} == {"conv", "elementwise"}
    for k, f, b, t in zip(kinds, flops, nbytes, measured):
        assert model.time_ms(f, b, k) == pytest.approx(t, rel=0.15)


def test_database_tag_names_untuned_and_rejects_unknown_databases():
    from tvm.s_tir import meta_schedule as ms

    assert cost.database_tag(None) == "untuned"
    with pytest.raises(ValueError, match="database_tag"):  # no files to name it by
        cost.database_tag(ms.database.MemoryDatabase())
    with pytest.raises(DatabaseTypeError, match="not object"):
        cost.database_tag(object())


def test_kernel_cache_measures_once_and_is_reused_across_runs(tmp_path, cpu):
    mod = T.merge_matmul_graph()
    first = cost.KernelCostCache(cpu, directory=tmp_path, repeat=3)
    ms = first(mod)
    assert ms > 0 and first.misses >= 1 and first.hits == 0
    lines = (tmp_path / "kernels.jsonl").read_text().splitlines()
    assert len(lines) == first.misses
    entry = json.loads(lines[0])
    assert entry["database"] == "untuned" and entry["target"] == str(cpu) and entry["median_ms"] > 0
    (tmp_path / "kernels.jsonl").open("a").write('{"key": "cut short\n')  # a killed run's last line
    second = cost.KernelCostCache(cpu, directory=tmp_path)
    assert second(mod) == pytest.approx(ms) and second.misses == 0 and second.hits == first.misses
    other = cost.KernelCostCache(cpu, directory=tmp_path, tag="some-database", repeat=3)
    other(mod)
    assert other.hits == 0  # another database never reuses these entries


def test_compare_costs_reports_every_estimate(tmp_path, cpu):
    mod = chain()
    inputs = [np.ones((4, 8), "float32")]
    cmp = cost.compare_costs(mod, cpu, inputs, cost.KernelCostCache(cpu, directory=tmp_path, repeat=3), repeat=3)
    d = cmp.as_dict()
    assert min(cmp.end_to_end_ms, cmp.kernel_sum_ms, cmp.kernel_roofline_ms, cmp.graph_roofline_ms) > 0
    assert set(d["rel_error"]) == {"kernel_sum", "kernel_roofline", "graph_roofline"}
    assert d["rel_error"]["kernel_sum"] == pytest.approx((cmp.kernel_sum_ms - cmp.end_to_end_ms) / cmp.end_to_end_ms)


def test_memo_costs_each_distinct_graph_once():
    calls = []
    fn = cost.Memo(lambda m: calls.append(1) or 1.0)
    a, b = chain(), chain()
    fn(a), fn(b), fn(a)
    assert len(calls) == 1  # b is structurally equal to a


def test_memo_is_bounded_and_keeps_recent_graphs():
    calls = []
    fn = cost.Memo(lambda m: calls.append(1) or 1.0, max_graphs=2)
    graphs = [T.merge_matmul_graph(), T.bn_graph(), T.attention_graph()]
    for g in graphs:
        fn(g)
    assert len(calls) == 3 and len(fn.values) == 2
    assert all(isinstance(v, float) for v in fn.values.values())  # values only: no graph (and its weights) kept
    fn(graphs[2])
    assert len(calls) == 3  # recent: still remembered
    fn(graphs[0])
    assert len(calls) == 4  # the oldest was dropped


def test_pair_measure_times_both_graphs_side_by_side(cpu):
    mod = T.merge_matmul_graph()
    built = []
    measure_both = cost.pair_measure(cpu, repeat=3, tune=lambda m: built.append(m))  # `tune` sees each side
    before, after = measure_both(mod, mod)
    assert before > 0 and after > 0
    assert len(built) == 2 and all(m is mod for m in built)
