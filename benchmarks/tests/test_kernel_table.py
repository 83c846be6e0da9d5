"""The per-kernel table (benchmarks/kernel_table.py): rates, families, ORT beside ours."""
import pytest

from benchmarks.kernel_table import family, format_table, table


def test_kernels_and_onnx_ops_fall_into_the_same_families():
    assert [family(n) for n in ("fused_conv2d_add_clip", "Conv", "FusedConv", "fused_matmul_add", "MatMul",
                                "Gemm", "fused_batch_norm_tir_clip", "Add")] == \
        ["conv", "conv", "conv", "matmul", "matmul", "matmul", "other", "other"]


def test_rates_are_flops_over_time_and_families_sum_their_kernels():
    kernels = {"conv2d1": {"ms": 2.0, "calls": 2}, "fused_matmul_add": {"ms": 1.0, "calls": 1},
               "add": {"ms": 0.5, "calls": 1}, "vm.builtin.alloc_storage": {"ms": 0.1, "calls": 3}}
    flops = {"conv2d1": 100e6, "fused_matmul_add": 50e6, "add": 0.0}
    result = table("m", kernels, flops, machine=200.0, ort={"FusedConv": 1.0, "MatMul": 0.5, "Add": 0.1})
    rows = {r["kernel"]: r for r in result["kernels"]}
    assert set(rows) == {"conv2d1", "fused_matmul_add", "add"}  # the VM's builtins are not kernels
    assert rows["conv2d1"]["gflops"] == pytest.approx(100.0)  # 2 calls x 100 MFLOP in 2 ms
    assert rows["conv2d1"]["of_machine"] == pytest.approx(0.5) and rows["add"]["gflops"] is None
    conv = result["families"]["conv"]
    assert conv["ms"] == 2.0 and conv["ort_ms"] == 1.0 and conv["ort_gflops"] == pytest.approx(200.0)
    assert result["families"]["other"]["ort_ms"] == pytest.approx(0.1)
    text = format_table(result, top=2)
    assert "0.50x" in text and "conv2d1" in text and "add\n" not in text  # ORT twice as fast on convs; top 2
