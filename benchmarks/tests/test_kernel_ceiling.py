"""kernel_ceiling's pieces on tiny shapes (seconds; no tuning): the hand GEMM schedule and MetaSchedule-space
replay are numerically right, and the script's table and JSON carry the expected fields."""
import json

import numpy as np
import pytest
import tvm

from benchmarks import kernel_ceiling
from benchmarks.kernels import hand, tuned
from benchmarks.kernels.workloads import parse_shape, relax_module
from tvm_rl.measure import host_cpu_target

TARGET = host_cpu_target(cores=2)


def run(mod, args, out_shape):
    kern = kernel_ceiling.tvm_kernel(mod, TARGET, args, out_shape)
    kern.run()
    return kern.output()


@pytest.mark.parametrize("mt,nt", [(4, 16), (8, 32)])
def test_hand_gemm_matches_numpy(mt, nt):
    rng = np.random.default_rng(0)
    a, w = rng.uniform(-1, 1, (64, 64)).astype("float32"), rng.uniform(-1, 1, (64, 64)).astype("float32")
    got = run(hand.gemm(64, 64, 64, mt, nt), [a, hand.pack_weight(w, nt)], (64, 64))
    np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pack", [0, 16])
def test_ms_replay_matches_numpy(pack):
    shape = parse_shape("gemm:64x64x64")
    x, w = shape.arrays()
    mod = hand.ms_replay(tuned.workload(shape, TARGET), [16, 1, 1, 4], [4, 1, 1, 16], [1, 64], pack=pack)
    got = run(mod, [x, hand.pack_weight(w, pack) if pack else w], (64, 64))
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)


def test_bad_tile_is_refused():
    with pytest.raises(ValueError):
        hand.gemm(64, 64, 64, 6, 16)


def test_conv_reference_matches_direct_sum():
    shape = parse_shape("conv:4x4x2x3")
    x, w = shape.arrays()
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    want = np.einsum("oikl,ikl->o", w, xp[:, 1:4, 2:5])  # output pixel (1, 2)
    np.testing.assert_allclose(shape.reference(x, w)[0, :, 1, 2], want, rtol=1e-4, atol=1e-6)
    assert shape.flops == 2 * 3 * 4 * 4 * 2 * 9


def test_script_writes_table_and_json(tmp_path, capsys):
    out = tmp_path / "kc.json"
    result = kernel_ceiling.main(["--shapes", "gemm:64x64x64", "conv:8x8x16x16", "--no-tune", "--trials", "0",
                                  "--work-dir", str(tmp_path / "db"), "--rounds", "3", "--machine-size", "256",
                                  "--tile", "4", "16", "--conv-tile", "4", "16", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["machine_gflops"] > 0 and saved["threads"] == 2 and saved["trials"] == 0
    gemm, conv = saved["rows"]
    assert {"onnxruntime", "tvm_default", "hand", "ms_space_at_hand_tiles",
            "ms_space_at_hand_tiles_packed"} <= set(gemm["timings"])
    assert {"onnxruntime", "tvm_default", "hand"} <= set(conv["timings"])
    for t in gemm["timings"].values():
        assert t["gflops"] > 0 and t["median_ms"] > 0 and len(t["samples_ms"]) == 3
    assert max(gemm["max_abs_err"].values()) < 1e-3
    table = capsys.readouterr().out
    assert "machine GEMM" in table and "gemm_64x64x64" in table and "noise" in table
    assert result["rows"][0]["shape"] == "gemm_64x64x64"


def test_hand_conv_matches_numpy():
    shape = parse_shape("conv:8x8x16x32")
    x, w = shape.arrays()
    got = run(hand.conv3x3(16, 8, 8, 32, 4, 16), [x, hand.pack_conv_weight(w, 16)], (1, 32, 8, 8))
    np.testing.assert_allclose(got, shape.reference(x, w), rtol=1e-4, atol=1e-4)


def test_stripped_kernel_runs_on_its_own_parameter_shapes():
    kern = kernel_ceiling.tvm_stripped(hand.gemm(64, 64, 64, 4, 16), TARGET)  # no rewrite block: unchanged
    kern.run()
    assert kern.output is None and kern.timer(2) > 0


def test_prepacked_build_without_records_is_correct(tmp_path):
    from tvm import relax

    shape = parse_shape("gemm:16x32x48")
    vm = relax.VirtualMachine(tuned.prepacked_build(relax_module(shape), TARGET, str(tmp_path)), tvm.cpu())
    x, w = shape.arrays()
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), x @ w, rtol=1e-4, atol=1e-4)
