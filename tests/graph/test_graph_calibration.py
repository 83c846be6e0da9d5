"""Rooflines fitted to a tuning database: kernels read with their kind, FLOPs and best latency; fit cached."""
import json

import pytest
from tvm import relax

from tvm_rl import models
from tvm_rl.graph import calibration, roofline
from tvm_rl.tune import open_database, tune_model


def test_kernels_are_classified_by_their_blocks():
    assert roofline.block_kind(["pad_temp", "conv2d_nchw", "T_add", "compute"]) == "conv"
    assert roofline.block_kind(["NT_matmul", "T_add"]) == "matmul"
    # R.nn.attention's kernel: batch matmuls around a softmax; priced as a plain matmul it looked 40% too fast
    attention = ["T_transpose", "T_batch_matmul_NT", "T_divide", "T_softmax_maxelem", "T_softmax_exp",
                 "T_softmax_expsum", "T_softmax_norm", "T_batch_matmul_NN", "T_reshape_3"]
    assert roofline.block_kind(attention) == "attention" == roofline.op_kind("relax.nn.attention")
    assert roofline.block_kind(["T_batch_matmul_NT"]) == "matmul"
    assert roofline.block_kind(["pad_temp", "pool_max"]) == "pool"
    assert roofline.block_kind(["T_softmax_maxelem", "T_softmax_exp", "T_softmax_norm"]) == "reduce"
    assert roofline.block_kind(["T_subtract", "T_divide", "T_multiply", "T_add", "compute"]) == "elementwise"
    # the Relax side names an inference batch norm the same way, so both sides share one roofline
    assert roofline.op_kind("relax.nn.batch_norm") == "elementwise"
    assert roofline.op_kind("relax.nn.layer_norm") == "reduce"
    assert roofline.block_kind(["T_divide", "lv88_red"]) == "reduce"
    assert roofline.op_kind("relax.max") == "reduce" and roofline.op_kind("relax.maximum") == "elementwise"


def test_convs_are_classified_by_layout_and_grouping_on_both_sides():
    """Tuned on CPU, depthwise convs ran up to 3.6x faster in NHWC: each layout and grouping gets its roofline."""
    assert roofline.block_kind(["pad_temp", "conv2d_nhwc"]) == "conv_nhwc"
    assert roofline.block_kind(["pad_temp", "group_conv2d_nchw", "T_add"]) == "group_conv"
    assert roofline.block_kind(["pad_temp", "group_conv2d_nhwc"]) == "group_conv_nhwc"
    x, w, dw = (relax.Var(n, relax.TensorType(s, "float32"))
                for n, s in (("x", (1, 8, 8, 8)), ("w", (8, 8, 3, 3)), ("dw", (8, 1, 3, 3))))
    nchw = relax.op.nn.conv2d(x, w, padding=1)
    nhwc = relax.op.nn.conv2d(x, relax.op.permute_dims(w, [2, 3, 1, 0]), data_layout="NHWC", kernel_layout="HWIO")
    depthwise = relax.op.nn.conv2d(x, dw, groups=8, padding=1)
    assert [roofline.call_kind(c) for c in (nchw, nhwc, depthwise)] == ["conv", "conv_nhwc", "group_conv"]


def test_transposes_are_a_kind_of_their_own_on_both_sides():
    """Tuned on CPU, NCHW<->NHWC transposes ran at half the bandwidth of other element-wise kernels."""
    assert roofline.block_kind(["T_transpose", "compute"]) == "transpose"
    assert roofline.op_kind("fused_transpose1_tir_clip1") == "transpose"
    assert roofline.op_kind("relax.permute_dims") == "transpose" == roofline.op_kind("relax.layout_transform")
    # a transpose inside a matmul or attention kernel leaves it that kind
    assert roofline.block_kind(["T_transpose", "NT_matmul"]) == "matmul"
    assert roofline.op_kind("relax.add") == "elementwise"


def test_a_fused_group_with_a_transpose_is_priced_as_one():
    from tvm.script import relax as R

    from tests.support import graph_examples as testing
    from tvm_rl.graph import profiles

    def body(emit, x):  # add, then transpose: the group's first op is element-wise, its pace the transpose's
        return emit(R.permute_dims(emit(R.add(x, x)), [0, 2, 3, 1]))

    kinds = [k.kind for k in profiles.fused_groups(testing.module(body, [(1, 8, 16, 16)]))]
    assert kinds == ["transpose"]
    slow = roofline.RooflineModel(roofline.Hardware(100.0, 100.0),
                                  (("transpose", roofline.Hardware(100.0, 1.0)),))
    mod = testing.module(body, [(1, 8, 16, 16)])
    assert profiles.graph_roofline_ms(mod, slow) > 50 * profiles.graph_roofline_ms(mod, roofline.Hardware(100.0, 100.0))


def test_a_kind_without_its_own_roofline_borrows_its_familys():
    conv, depthwise, rest = roofline.Hardware(10.0, 5.0), roofline.Hardware(1.0, 1.0), roofline.Hardware(100.0, 100.0)
    model = roofline.RooflineModel(rest, (("conv", conv), ("group_conv", depthwise)))
    f, b = 1e7, 1e6
    assert model.time_ms(f, b, "conv_nhwc") == conv.time_ms(f, b)
    assert model.time_ms(f, b, "group_conv_nhwc") == depthwise.time_ms(f, b)
    assert model.time_ms(f, b, "elementwise") == rest.time_ms(f, b)
    assert roofline.RooflineModel(rest).time_ms(f, b, "group_conv_nhwc") == rest.time_ms(f, b)
    # a roofline fitted before transposes had their own kind prices them as its element-wise kernels
    ewise = roofline.Hardware(20.0, 30.0)
    old = roofline.RooflineModel(rest, (("elementwise", ewise),))
    assert old.time_ms(f, b, "transpose") == ewise.time_ms(f, b)


def test_fit_recovers_the_rooflines_of_known_kernels():
    slow, fast = roofline.Hardware(10.0, 5.0, 2.0), roofline.Hardware(50.0, 40.0, 1.0)
    kernels = [calibration.TunedKernel(kind, f, b, (slow if kind == "conv" else fast).time_ms(f, b))
               for kind in ("conv", "elementwise") for f, b in ((1e6, 1e5), (1e7, 2e5), (3e7, 5e6), (1e5, 1e6))]
    model = calibration.fit(kernels)
    assert max(calibration.fit_error(model, kernels).values()) < 0.15
    with pytest.raises(ValueError, match="no tuned kernels"):
        calibration.fit([])


def test_without_tuned_kernels_the_proxy_keeps_the_nominal_roofline(cpu, tmp_path):
    assert calibration.proxy_roofline(cpu) == roofline.default_hardware(cpu)
    assert calibration.proxy_roofline(cpu, tmp_path) == roofline.default_hardware(cpu)  # no database there
    from tvm.s_tir import meta_schedule as ms
    assert calibration.proxy_roofline(cpu, ms.database.MemoryDatabase()) == roofline.default_hardware(cpu)


@pytest.mark.slow
def test_tuned_roofline_reads_a_database_and_caches_the_fit(cpu, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        calibration.tuned_roofline(tmp_path)
    model = models.load("bert", "tiny")
    for kernel in ("fused_matmul_add", "layer_norm"):
        # random sampling: any tuned records will do for the fit (evolutionary search costs a minute here)
        tune_model(model.mod, cpu, tmp_path, trials_per_kernel=2, trials_per_iter=2, op_filter=kernel,
                   strategy="random")
    kernels = calibration.tuned_kernels(tmp_path)
    assert {k.kind for k in kernels} >= {"matmul", "reduce"}
    assert all(k.best_ms > 0 and k.nbytes > 0 for k in kernels)
    assert next(k for k in kernels if k.kind == "matmul").flops > 0
    fitted = calibration.tuned_roofline(tmp_path, cpu)
    saved = json.loads((tmp_path / "roofline.json").read_text())
    assert saved["kernels"] == len(kernels) and saved["default"]["source"].startswith("calibrated")
    # The cache answers while the database is unchanged: no kernel is read again.
    monkeypatch.setattr(calibration, "tuned_kernels", lambda *_: pytest.fail("refitted an unchanged database"))
    assert calibration.tuned_roofline(tmp_path, cpu) == fitted
    # What the searches and RLRewritePass price graphs with, given the work dir or the database itself.
    assert calibration.proxy_roofline(cpu, tmp_path) == calibration.proxy_roofline(cpu, open_database(tmp_path)) \
        == fitted


def test_layout_pairs_match_one_convolution_in_two_layouts():
    nchw = calibration.TunedKernel("group_conv", 1e6, 100, 0.2, ((1, 8, 14, 14), (8, 1, 3, 3), (1, 8, 14, 14)))
    nhwc = calibration.TunedKernel("group_conv_nhwc", 1e6, 100, 0.1, ((1, 14, 14, 8), (3, 3, 1, 8), (1, 14, 14, 8)))
    other_shape = calibration.TunedKernel("group_conv_nhwc", 1e6, 100, 0.1,
                                          ((1, 7, 7, 32), (3, 3, 1, 8), (1, 7, 7, 32)))
    plain = calibration.TunedKernel("conv_nhwc", 1e6, 100, 0.1, nhwc.shapes)  # not grouped: another conv
    assert calibration.layout_pairs([nchw, nhwc, other_shape, plain]) == [(nchw, nhwc)]
