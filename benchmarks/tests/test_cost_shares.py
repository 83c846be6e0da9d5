"""benchmarks.graphs.cost_shares: a graph's priced time by kind, and the part of it no FLOP-preserving rewrite can
lower; benchmarks/graph_cost_shares.py prices a model and the default arm's graph of it."""
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.graphs.cost_shares import cost_shares
from tests.support import graph_examples as T
from tvm_rl.graph import profiles, roofline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import graph_cost_shares  # noqa: E402

R = T.R


def conv_relu(cin: int = 8, cout: int = 16, hw: int = 12, k: int = 3):
    rng = np.random.default_rng(0)
    return T.module(lambda emit, x: emit(R.nn.relu(emit(R.nn.conv2d(x, T.rand(rng, cout, cin, k, k), padding=1)))),
                    [(1, cin, hw, hw)])


def adds():
    return T.module(lambda emit, x, y: emit(R.exp(emit(R.add(x, y)))), [(64, 64), (64, 64)])


def test_shares_add_up_to_the_graph_roofline():
    mod = T.bn_chain_graph(layers=3)
    model = roofline.RooflineModel(roofline.Hardware(100.0, 20.0, 5.0),
                                   (("conv", roofline.Hardware(50.0, 10.0)),))
    s = cost_shares(mod, model)
    assert s.total_ms == pytest.approx(profiles.graph_roofline_ms(mod, model))
    assert sum(k.ms for k in s.kinds.values()) == pytest.approx(s.total_ms)
    assert sum(k.kernels for k in s.kinds.values()) == len(profiles.fused_groups(mod))


def test_a_compute_bound_conv_is_fixed_by_its_flops():
    mod = conv_relu()
    (kernel,) = profiles.fused_groups(mod)
    slow_memory = roofline.Hardware(1.0, 1e6)  # every kernel compute-bound
    s = cost_shares(mod, slow_memory)
    assert s.kinds["conv"].compute_bound_ms == pytest.approx(s.total_ms)
    assert s.fixed_ms == pytest.approx(kernel.flops / 1e9 * 1e3)
    assert s.movable_share == pytest.approx(0.0, abs=1e-9)
    assert s.max_speedup == pytest.approx(1.0)


def test_memory_bound_kernels_are_movable():
    s = cost_shares(adds(), roofline.Hardware(1e6, 1.0))
    assert s.fixed_ms == 0.0 and s.movable_share == 1.0 and math.isinf(s.max_speedup)


def test_a_layout_with_a_higher_peak_makes_part_of_a_conv_movable():
    mod = conv_relu()
    (kernel,) = profiles.fused_groups(mod)
    model = roofline.RooflineModel(roofline.Hardware(1.0, 1e6),
                                   (("conv", roofline.Hardware(1.0, 1e6)), ("conv_nhwc", roofline.Hardware(4.0, 1e6))))
    s = cost_shares(mod, model)
    assert s.fixed_ms == pytest.approx(kernel.flops / 4e9 * 1e3)  # its FLOPs at the NHWC peak stay
    assert s.movable_share == pytest.approx(0.75)


def test_a_kind_without_a_roofline_borrows_its_familys():
    model = roofline.RooflineModel(roofline.Hardware(1.0, 1.0), (("conv", roofline.Hardware(7.0, 7.0)),))
    assert model.for_kind("conv_nhwc").peak_gflops == 7.0
    assert model.for_kind("pool") is model.default and model.for_kind(None) is model.default
    single = roofline.Hardware(3.0, 3.0)
    assert single.for_kind("conv") is single


def test_the_benchmark_prices_a_model_and_its_default_graph(tmp_path):
    out = tmp_path / "shares.json"
    assert graph_cost_shares.main(["--size", "tiny", "--models", "resnet18", "--steps", "10", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["models"]
    exported, default = row["exported"], row["default"]
    assert row["default_speedup"] == pytest.approx(exported["total_ms"] / default["total_ms"])
    assert row["default_speedup"] > 1.0 and row["default_applied"]
    assert 0.0 <= default["movable_share"] <= 1.0


def test_compute_bound_elementwise_work_could_be_fused_into_a_faster_kernel():
    mod = adds()
    kernels = profiles.fused_groups(mod)
    flops = sum(k.flops for k in kernels)
    model = roofline.RooflineModel(roofline.Hardware(1.0, 1e6), (("elementwise", roofline.Hardware(1.0, 1e6)),
                                                                  ("matmul", roofline.Hardware(8.0, 1e6))))
    s = cost_shares(mod, model)
    assert s.kinds["elementwise"].compute_bound_ms == pytest.approx(s.total_ms)
    assert s.fixed_ms == pytest.approx(flops / 8e9 * 1e3)  # its FLOPs at the matmul peak, fused into one
