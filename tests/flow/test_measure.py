"""The harness: targets, median/spread statistics, tolerance checks (cases that must fail too), kernels."""
import time

import numpy as np
import pytest

from tvm_rl import measure, models
from tvm_rl.errors import MismatchError, TargetError


def test_summarize_median_and_spread():
    t = measure.summarize([5.0, 1.0, 3.0, 100.0, 2.0])
    assert t.median_ms == 3.0 and t.min_ms == 1.0 and t.max_ms == 100.0 and t.repeats == 5
    assert t.iqr_ms == pytest.approx(5.0 - 2.0)  # an outlier moves the max, not the median or the IQR
    assert measure.summarize([4.0, 2.0]).median_ms == 3.0
    assert measure.summarize([7.0]).iqr_ms == 0.0
    with pytest.raises(ValueError, match="no timing samples"):
        measure.summarize([])


def test_time_callable_counts_warmup_and_repeats():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.002)

    t = measure.time_callable(fn, warmup=3, repeat=7)
    assert len(calls) == 10 and t.repeats == 7
    assert 1.5 <= t.median_ms < 50


def test_compare_passes_within_and_fails_outside_tolerance():
    ref = [np.array([1.0, -2.0, 1000.0], dtype=np.float32)]
    assert measure.compare([ref[0] + 5e-5], ref).ok
    assert measure.compare([ref[0] * (1 + 5e-5)], ref).ok  # relative part scales with |ref|
    assert not measure.compare([ref[0] + np.array([0, 0, 1.0], dtype=np.float32)], ref).ok
    bad = measure.compare([ref[0] + np.array([0, 1e-2, 0], dtype=np.float32)], ref)
    assert not bad.ok and bad.max_abs_err == pytest.approx(1e-2, rel=1e-3)
    with pytest.raises(MismatchError, match="output 0 differs.*max abs error"):
        measure.assert_close([ref[0] + 1], ref)


def test_compare_catches_nan_shape_and_count():
    ref = [np.ones(3, np.float32), np.zeros(2, np.float32)]
    assert not measure.compare([ref[0], np.array([0, np.nan], np.float32)], ref).ok
    assert measure.compare([ref[0], np.zeros(2, np.float32)], ref).ok
    with pytest.raises(MismatchError, match="output 1 has shape"):
        measure.compare([ref[0], np.zeros(3, np.float32)], ref)
    with pytest.raises(MismatchError, match="1 outputs, but the reference has 2"):
        measure.compare(ref[:1], ref)


def test_compare_takes_one_tolerance_per_output():
    ref = [np.full(3, 1000.0, np.float32), np.full(3, 1e-3, np.float32)]
    off = [ref[0], ref[1] * 1.1]
    assert measure.compare(off, ref, atol=[1e-1, 1e-1]).ok
    assert not measure.compare(off, ref, atol=[1e-1, 1e-7]).ok
    with pytest.raises(ValueError, match="2 tolerances for 1 outputs"):
        measure.compare(ref[:1], ref[:1], atol=[1.0, 1.0])


def test_compare_names_the_failing_output():
    ref = [np.ones(3, np.float32), np.ones(3, np.float32)]
    with pytest.raises(MismatchError, match="output 1 differs"):
        measure.assert_close([ref[0], ref[1] * 2], ref)


def test_targets():
    cpu = measure.parse_target("llvm")
    assert cpu.kind.name == "llvm" and cpu.attrs["mcpu"]
    gpu = measure.parse_target("cuda:sm_80")
    assert gpu.kind.name == "cuda" and gpu.attrs["arch"] == "sm_80" and measure.is_gpu(gpu)
    assert measure.parse_target('{"kind": "llvm"}').kind.name == "llvm"
    with pytest.raises(TargetError, match="unknown target 'tpu'"):
        measure.parse_target("tpu")
    with pytest.raises(TargetError, match="arch must look like"):
        measure.parse_target("cuda:90")
    with pytest.raises(TargetError, match="not valid JSON"):
        measure.parse_target("{kind: llvm")


def test_missing_gpu_is_a_clear_error():
    import tvm

    if tvm.cuda().exist:
        pytest.skip("this machine has a GPU")
    with pytest.raises(TargetError, match="no cuda device"):
        measure.device_for(measure.cuda_target())


def test_runner_times_a_model_and_its_kernels(cpu):
    model = models.load("bert", "tiny")
    runner = measure.Runner(measure.build(model.mod, cpu), cpu)
    timing = runner.time(model.inputs, warmup=1, repeat=5)
    assert timing.repeats == 5 and 0 < timing.min_ms <= timing.median_ms <= timing.max_ms
    kernels = measure.time_kernels(model.mod, cpu, repeat=3)
    assert len(kernels) >= 5
    assert all(k.calls >= 1 and k.timing.median_ms > 0 for k in kernels)
    # Two layers share every kernel shape, so the per-layer kernels are called twice.
    assert max(k.calls for k in kernels) >= 2
    assert len({k.structural_hash for k in kernels}) == len(kernels)


def test_interleaved_timing_times_every_build(cpu):
    from tvm_rl import models

    m = models.load("squeezenet1_1", "tiny")
    runner = measure.Runner(measure.build(m.mod, cpu), cpu)
    timings = measure.time_interleaved({"a": runner, "b": runner}, m.inputs, repeat=5)
    assert set(timings) == {"a", "b"}
    assert all(t.repeats == 5 and 0 < t.min_ms <= t.median_ms <= t.max_ms for t in timings.values())
