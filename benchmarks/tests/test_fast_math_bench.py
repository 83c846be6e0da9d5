"""benchmarks/fast_math.py: the speedup interval, the per-function mode, and a resumable model run."""
import pytest

from tvm_rl import measure


def test_the_speedup_interval_resamples_rounds_in_pairs():
    from benchmarks.fast_math import ratio_ci

    slow = [10.0, 30.0, 10.0, 30.0] * 10  # load swings both builds alike, round by round
    lo, hi = ratio_ci(slow, [s / 2 for s in slow])
    assert lo == hi == 2.0
    lo, hi = ratio_ci([10.0, 11.0, 12.0] * 10, [5.0, 6.0, 7.0] * 10)
    assert 1.5 < lo < 11.0 / 6.0 < hi < 2.5


def test_functions_mode_times_each_function_and_bounds_its_error(cpu):
    from benchmarks.fast_math import time_functions

    rows = time_functions(cpu, repeat=1, points=10_001)
    assert set(rows) == {"erf", "tanh", "exp", "sigmoid"}
    assert all(r["fast"]["max_error"] < 5e-7 and r["exact"]["ns_per_element"] > 0 for r in rows.values())
    with pytest.raises(SystemExit, match="llvm"):
        time_functions(measure.cuda_target("sm_90"), repeat=1)


@pytest.mark.slow
def test_benchmark_measures_both_builds_resumes_and_redoes_with_force(tmp_path, capsys):
    from benchmarks.fast_math import main

    argv = ["--models", "mbconv_se", "--size", "tiny", "--tune-trials", "0", "--repeat", "3", "--no-torch",
            "--out", str(tmp_path / "fm.json")]
    rows = main(argv)
    row = rows["mbconv_se"]
    assert row["transcendentals"] and row["repeat"] == 3 and row["speedup"] > 0
    assert row["speedup_ci95"][0] <= row["speedup_ci95"][1] and set(row["ms"]) == {"exact", "fast"}
    assert (tmp_path / "fm.png").exists()
    assert main(argv) == rows and "already measured" in capsys.readouterr().out
    assert main(argv + ["--force"])["mbconv_se"]["ms"] != row["ms"]
