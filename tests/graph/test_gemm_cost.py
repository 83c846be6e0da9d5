"""GEMM efficiency by shape: shapes read off Relax calls and tuned kernels, a model fitted to rates that depend on
shape, and the proxy pricing matmuls with it (merges and padding are then no longer neutral)."""
import numpy as np
import pytest
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.graph import calibration, gemm_cost, profiles, roofline
from tvm_rl.graph.gemm_cost import GemmShape


def law_gflops(s: GemmShape) -> float:
    """A synthetic tuned-GEMM rate: grows with M and N, saturating; a ragged N costs a third."""
    rate = 60.0 * (1 - np.exp(-s.m / 48)) * (1 - np.exp(-s.n / 256))
    return rate * (0.66 if s.n % gemm_cost.ALIGN else 1.0)


def law_ms(s: GemmShape) -> float:
    return s.flops / (law_gflops(s) * 1e9) * 1e3


SHAPES = [GemmShape(1, m, n, k) for m in (16, 64, 65, 128) for n, k in ((512, 512), (1000, 768), (3072, 1024),
                                                                      (768, 768), (2304, 768), (80, 512))]


def test_gemm_shapes_from_operands_and_kernels():
    assert gemm_cost.gemm_shape((64, 1024), (1024, 3072)) == GemmShape(1, 64, 3072, 1024)
    assert gemm_cost.gemm_shape((2, 12, 65, 64), (2, 12, 64, 65)) == GemmShape(24, 65, 65, 64)
    assert gemm_cost.gemm_shape((2, 8, 16), (16, 4)) == GemmShape(2, 8, 4, 16)
    assert gemm_cost.gemm_shape((8, 16), (8, 4)) is None  # K mismatch
    assert gemm_cost.gemm_shape((16,), (16, 4)) is None  # a vector operand
    s = GemmShape(1, 8, 4, 16)
    assert gemm_cost.kernel_gemm_shape([(8, 16), (16, 4), (4,), (8, 4)], s.flops + 8 * 4) == s  # + bias epilogue
    # FLOPs that disagree with the first two buffers: not a plain GEMM kernel (attention, NT layouts)
    assert gemm_cost.kernel_gemm_shape([(8, 16), (16, 4), (8, 4)], 10 * s.flops) is None
    assert gemm_cost.kernel_gemm_shape([(8, 16), (16, 4)], s.flops) is None


def test_fit_learns_rates_that_depend_on_shape_and_beats_one_rate_out_of_sample():
    measured = [law_ms(s) for s in SHAPES]
    model = gemm_cost.fit(SHAPES, measured)
    err = [abs(model.time_ms(s) / t - 1) for s, t in zip(SHAPES, measured)]
    assert np.median(err) < 0.15
    loo = gemm_cost.leave_one_out(SHAPES, measured)
    # one rate for every GEMM (what a per-kind roofline does, compute-bound): its best constant, in sample
    rates = np.array([law_gflops(s) for s in SHAPES])
    one_rate = np.median(np.abs(np.median(rates) / rates - 1))
    assert np.median(loo) < 0.5 * one_rate
    # a ragged N is priced slower than its aligned neighbour of equal FLOPs' scale
    assert model.gflops(GemmShape(1, 64, 1000, 768)) < model.gflops(GemmShape(1, 64, 1008, 768))


def test_too_few_gemms_give_no_model_and_mismatched_lists_an_error():
    assert gemm_cost.fit(SHAPES[:gemm_cost.MIN_KERNELS - 1], [1.0] * (gemm_cost.MIN_KERNELS - 1)) is None
    with pytest.raises(ValueError, match="one latency per shape"):
        gemm_cost.fit(SHAPES, [1.0])


def test_predictions_are_clipped_to_the_rates_seen():
    model = gemm_cost.fit(SHAPES, [law_ms(s) for s in SHAPES])
    huge = GemmShape(1, 1 << 16, 1 << 16, 1 << 16)
    assert model.gflops(huge) <= max(law_gflops(s) for s in SHAPES) * 1.0001


def test_roofline_model_prices_matmuls_of_known_shape_with_the_gemm_model():
    rest = roofline.Hardware(40.0, 20.0)
    model = gemm_cost.fit(SHAPES, [law_ms(s) for s in SHAPES])
    with_gemm = roofline.RooflineModel(rest, (("matmul", rest),), model)
    s = GemmShape(1, 64, 3072, 1024)
    assert with_gemm.time_ms(s.flops, 1e6, "matmul", s) == pytest.approx(model.time_ms(s))
    assert with_gemm.time_ms(s.flops, 1e6, "matmul") == rest.time_ms(s.flops, 1e6)  # shape unknown
    assert with_gemm.time_ms(s.flops, 1e6, "conv", s) == rest.time_ms(s.flops, 1e6)  # not a matmul
    # saved with a policy's feature spec and rebuilt exactly
    assert roofline.from_dict(with_gemm.as_dict()) == with_gemm


def test_calibration_fits_the_gemm_model_from_tuned_matmuls():
    kernels = [calibration.TunedKernel("matmul", s.flops, 4 * (s.m * s.k + s.k * s.n + s.m * s.n), law_ms(s),
                                       ((s.m, s.k), (s.k, s.n), (s.m, s.n))) for s in SHAPES]
    kernels.append(calibration.TunedKernel("elementwise", 1e5, 1e6, 0.05))
    model = calibration.fit(kernels)
    assert model.gemm is not None and model.gemm.kernels == len(SHAPES)
    assert calibration.fit_error(model, kernels)["matmul"] < 0.15
    assert calibration.fit(kernels[:3]).gemm is None  # too few matmuls: the roofline alone


def qkv(merged: bool, hidden: int = 64, rows: int = 8):
    """Three projections of one input, separate or merged into one GEMM of 3x the columns."""
    rng = np.random.default_rng(0)
    R = relax.op

    def body(e, x):
        if merged:
            y = e(R.matmul(x, T.rand(rng, hidden, 3 * hidden)))
            return e(R.split(y, 3, axis=-1))
        return tuple(e(R.matmul(x, T.rand(rng, hidden, hidden))) for _ in range(3))

    return T.module(body, [(rows, hidden)])


def test_fused_groups_carry_the_gemm_and_the_proxy_sees_a_merge():
    groups = profiles.fused_groups(qkv(False))
    assert [g.gemm for g in groups if g.kind == "matmul"] == [GemmShape(1, 8, 64, 64)] * 3
    flat = roofline.RooflineModel(roofline.Hardware(40.0, 20.0))
    # FLOPs are conserved: a rate that ignores shape prices the merge at (about) nothing
    before, after = (profiles.graph_roofline_ms(qkv(m), flat) for m in (False, True))
    assert after == pytest.approx(before, rel=0.35)
    # with rates that grow with N (as tuned GEMMs' do), the merged GEMM is priced faster
    shaped = roofline.RooflineModel(flat.default, (), gemm_cost.fit(SHAPES, [law_ms(s) for s in SHAPES]))
    assert profiles.graph_roofline_ms(qkv(True), shaped) < 0.9 * profiles.graph_roofline_ms(qkv(False), shaped)


def test_calibration_drops_the_gemm_model_when_shape_does_not_predict_rate():
    """Rates that are luck, not shape (16-trial tuning can move one shape 5x): one rate predicts as well."""
    rng = np.random.default_rng(0)
    kernels = [calibration.TunedKernel("matmul", s.flops, 4 * (s.m * s.k + s.k * s.n + s.m * s.n),
                                       s.flops / (rng.uniform(20, 140) * 1e9) * 1e3,
                                       ((s.m, s.k), (s.k, s.n), (s.m, s.n))) for s in SHAPES]
    assert gemm_cost.fit([gemm_cost.kernel_gemm_shape(k.shapes, k.flops) for k in kernels],
                         [k.best_ms for k in kernels]) is not None
    assert calibration.fit(kernels).gemm is None
