"""The tuner benchmark's measuring: the load check, the runner settings, and one small run end to end."""
import json

import pytest

from tvm_rl.tune import bench_runs


def fake_load(values):
    seq = iter(values)
    last = [values[-1]]

    def loadavg():
        last[0] = next(seq, last[0])
        return (last[0], 0.0, 0.0)

    return loadavg


def test_wait_for_cores_polls_until_the_load_drops():
    slept, lines = [], []
    info = bench_runs.wait_for_cores(100, threshold=1.5, poll=10, write=lines.append,
                                     loadavg=fake_load([3.0, 2.0, 1.0]), sleep=slept.append)
    assert slept == [10, 10] and info["waited_seconds"] == 20
    assert info["before"][0] == 3.0 and info["start"][0] == 1.0 and info["busy"] is False
    assert len(lines) == 1 and "waiting up to 100 s" in lines[0]


def test_wait_for_cores_gives_up_at_the_limit_and_records_busy_cores():
    slept, lines = [], []
    info = bench_runs.wait_for_cores(25, threshold=1.5, poll=10, write=lines.append, loadavg=fake_load([4.0]),
                                     sleep=slept.append)
    assert slept == [10, 10, 5] and info["busy"] is True and "running anyway" in lines[-1]
    quiet = bench_runs.wait_for_cores(0, threshold=1.5, write=lines.append, loadavg=fake_load([4.0]),
                                      sleep=slept.append)
    assert quiet["waited_seconds"] == 0 and quiet["busy"] is True and len(slept) == 3


def test_measuring_builds_a_cache_flushing_repeated_runner():
    from tvm_rl.measure import host_cpu_target

    m = bench_runs.Measuring(repeat=5)
    config = m.evaluator(host_cpu_target())
    assert (config.number, config.repeat, config.min_repeat_ms, config.enable_cpu_cache_flush) == (1, 5, 0, True)
    with pytest.raises(ValueError, match="repeat"):
        bench_runs.Measuring(repeat=0)


@pytest.mark.slow
def test_benchmark_end_to_end_and_resume(tmp_path, capsys):
    from tvm_rl.tune.benchmark import main

    task = "batch_matmul_b12_m128_n128_k64"
    argv = ["--tasks", task, "--arms", "evolutionary", "random", "--trials", "16", "--seeds", "1",
            "--load-wait", "0", "--retime-passes", "2", "--out", str(tmp_path / "tuner.json")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    state = json.loads((tmp_path / "tuner.json").read_text())
    assert (tmp_path / "tuner.png").stat().st_size > 0
    runs = {r["arm"]: r for r in state["runs"]}
    assert set(runs) == {"evolutionary", "random"}
    for r in runs.values():
        assert r["trials"] == 16 and r["shared"] == 8  # the shared batch counts in the budget
        assert len(r["retimed"]) == len(r["improvers"]) >= 1 and "busy" in r["load"]
    # Both arms start from the same measured batch.
    assert runs["evolutionary"]["tuning_seconds"][:8] == runs["random"]["tuning_seconds"][:8]
    assert "| evolutionary | 1 |" in first and "| random | 1 |" in first and f"[2/2] {task} random seed 0:" in first
    assert task in state["targets"] and state["cost"]["total_seconds"] > 0

    assert main(argv) == 0  # a rerun: nothing new to tune or re-time
    again = capsys.readouterr().out
    resumed = json.loads((tmp_path / "tuner.json").read_text())
    assert [r["started"] for r in resumed["runs"]] == [r["started"] for r in state["runs"]]
    assert f"] {task} evolutionary seed 0:" not in again and f"re-timing {task}" not in again
    assert "| random | 1 |" in again
    assert resumed["cost"]["shared_seconds"] == state["cost"]["shared_seconds"]
