"""The tuner benchmark's measuring: the load check, the runner settings, and one small run end to end."""
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.tuning import runs as bench_runs


def fake_others(values):
    seq = iter(values)
    last = [values[-1]]

    def others():
        last[0] = next(seq, last[0])
        return last[0]

    return others


def test_wait_for_cores_polls_until_other_processes_quiet_down():
    slept, lines = [], []
    info = bench_runs.wait_for_cores(100, threshold=0.5, poll=10, write=lines.append,
                                     others=fake_others([1.8, 1.0, 0.2]), sleep=slept.append)
    assert slept == [10, 10] and info["waited_seconds"] == 20
    assert info["others_before"] == 1.8 and info["others_start"] == 0.2 and info["busy"] is False
    assert len(lines) == 1 and "waiting up to 100 s" in lines[0] and "1.80 cores busy" in lines[0]


def test_wait_for_cores_gives_up_at_the_limit_and_records_busy_cores():
    slept, lines = [], []
    info = bench_runs.wait_for_cores(25, threshold=0.5, poll=10, write=lines.append, others=fake_others([2.0]),
                                     sleep=slept.append)
    assert slept == [10, 10, 5] and info["busy"] is True and "running anyway" in lines[-1]
    quiet = bench_runs.wait_for_cores(0, threshold=0.5, write=lines.append, others=fake_others([2.0]),
                                      sleep=slept.append)
    assert quiet["waited_seconds"] == 0 and quiet["busy"] is True and len(slept) == 3


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_others_busy_cores_does_not_count_this_process_or_its_children():
    """A busy loop here, and one in a child process, are this benchmark's own work, not competition."""
    # What other jobs on the machine keep busy (a CI runner is not always quiet) is read first, without our loops.
    baseline = bench_runs.others_busy_cores(window=1.0)
    child = multiprocessing.get_context("spawn").Process(target=_spin, args=(3.0,))
    child.start()
    try:
        mine = bench_runs.others_busy_cores(window=1.0, sleep=_spin)
    finally:
        child.join()
    # Without the subtraction this reads about 2 cores more than the baseline (this loop and the child's).
    assert mine < baseline + 0.7


def test_others_busy_cores_counts_a_process_outside_the_tree():
    """A busy process this one did not start (a detached `python -c` loop) is counted."""
    other = subprocess.Popen([sys.executable, "-c", "import time\nend=time.time()+60\nwhile time.time()<end: pass"],
                             start_new_session=True)
    try:
        time.sleep(0.5)
        # Read from a fresh process so `other` is not our child: a child is counted as ours.
        out = subprocess.run([sys.executable, "-c", "from benchmarks.tuning.runs import others_busy_cores; "
                              "print(others_busy_cores(window=1.5))"], capture_output=True, text=True, check=True)
    finally:
        other.kill()
        other.wait()
    assert float(out.stdout.split()[-1]) > 0.6


def test_measuring_builds_a_cache_flushing_repeated_runner():
    from tvm_rl.measure import host_cpu_target

    m = bench_runs.Measuring(repeat=5)
    config = m.evaluator(host_cpu_target())
    assert (config.number, config.repeat, config.min_repeat_ms, config.enable_cpu_cache_flush) == (1, 5, 0, True)
    with pytest.raises(ValueError, match="repeat"):
        bench_runs.Measuring(repeat=0)


@pytest.mark.slow
def test_benchmark_end_to_end_and_resume(tmp_path, capsys):
    from benchmarks.tuning.benchmark import main

    task = "batch_matmul_b12_m128_n128_k64"
    argv = ["--tasks", task, "--arms", "evolutionary-own-first", "evolutionary", "random", "--trials", "16",
            "--seeds", "1", "--load-wait", "0", "--retime-passes", "2", "--out", str(tmp_path / "tuner.json")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    state = json.loads((tmp_path / "tuner.json").read_text())
    assert (tmp_path / "tuner.png").stat().st_size > 0 and (tmp_path / "tuner_paired.png").stat().st_size > 0
    runs = {r["arm"]: r for r in state["runs"]}
    assert set(runs) == {"evolutionary-own-first", "evolutionary", "random"}
    for r in runs.values():
        assert r["trials"] == 16 and len(r["retimed"]) == len(r["improvers"]) >= 1 and "busy" in r["load"]
    # The shared batch counts in the budget, and both arms that share it start from the same measured batch; the
    # arm that picks its own (first in the order, before the shared batch existed) measured all 16 itself.
    assert runs["evolutionary"]["shared"] == runs["random"]["shared"] == 8
    assert runs["evolutionary"]["tuning_seconds"][:8] == runs["random"]["tuning_seconds"][:8]
    assert runs["evolutionary-own-first"]["shared"] == 0 and list(state["shared"]) == [f"{task}|0"]
    assert "| evolutionary | 1 |" in first and "| random | 1 |" in first and f"[3/3] {task} random seed 0:" in first
    assert task in state["targets"] and state["cost"]["total_seconds"] > 0

    assert main(argv) == 0  # a rerun: nothing new to tune or re-time
    again = capsys.readouterr().out
    resumed = json.loads((tmp_path / "tuner.json").read_text())
    assert [r["started"] for r in resumed["runs"]] == [r["started"] for r in state["runs"]]
    assert f"] {task} evolutionary seed 0:" not in again and f"re-timing {task}" not in again
    assert f"] {task} evolutionary-own-first seed 0:" not in again
    assert "| random | 1 |" in again
    assert resumed["cost"]["shared_seconds"] == state["cost"]["shared_seconds"]

    # The work dir is lost (a cut-off session's machine): the archive beside the JSON still re-times every run.
    shutil.rmtree(tmp_path / "scratch")
    for r in resumed["runs"]:
        r["retimed"] = None
    (tmp_path / "tuner.json").write_text(json.dumps(resumed))
    assert main(argv) == 0
    lost = capsys.readouterr().out
    retimed = json.loads((tmp_path / "tuner.json").read_text())
    assert f"re-timing {task}" in lost
    assert all(len(r["retimed"]) == len(r["improvers"]) and None not in r["retimed"] for r in retimed["runs"])


def test_benchmark_killed_mid_run_keeps_its_seconds_and_exits_143(tmp_path, monkeypatch, capsys):
    # A kill while a run is measuring: the process must not die with the sitting's seconds uncharged, and a
    # later Ctrl-C must be Python's own again.
    from benchmarks.tuning.benchmark import main

    def killed_while_measuring(*args, **kwargs):
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not stop the run")

    quiet = {"others_start": 0.0, "waited_seconds": 0.0, "busy": False}
    monkeypatch.setattr(bench_runs, "wait_for_cores", lambda *a, **k: quiet)
    monkeypatch.setattr(bench_runs, "shared_first_batch", killed_while_measuring)

    class Unhandled(Exception):
        pass

    def unhandled(signum, frame):  # the benchmark's own handling is missing; fail here, not kill pytest
        raise Unhandled

    before = signal.signal(signal.SIGTERM, unhandled)
    ctrl_c = signal.getsignal(signal.SIGINT)  # Python's own, or SIG_IGN where the tests run in the background
    out = tmp_path / "tuner.json"
    argv = ["--tasks", "batch_matmul_b12_m128_n128_k64", "--arms", "random", "--trials", "16", "--seeds", "1",
            "--out", str(out)]
    try:
        assert main(argv) == 143
        assert signal.getsignal(signal.SIGTERM) is unhandled
    finally:
        signal.signal(signal.SIGTERM, before)
    err = capsys.readouterr().err
    assert "0 finished runs are kept" in err and "the same command resumes" in err and "Traceback" not in err
    state = json.loads(out.read_text())
    assert state["runs"] == [] and state["shared"] == {}
    assert state["cost"]["interruptions"] == 1 and state["cost"]["total_seconds"] >= 0.3
    assert signal.getsignal(signal.SIGINT) is ctrl_c


def test_a_report_reads_re_timed_runs_made_on_another_cpu_and_names_what_still_needs_its_own(tmp_path):
    from benchmarks.tuning.benchmark import FORMAT, _load_state

    fixed = {"run_trials": 64, "per_iter": 16, "measuring": {"repeat": 7}}
    there, here = {**fixed, "target": "llvm -mcpu=znver5"}, {**fixed, "target": "llvm -mcpu=znver4"}
    out = tmp_path / "bench.json"
    runs = [{"task": "t", "arm": "evolutionary", "seed": 0, "retimed": [1e-3]}]
    state = {"format": FORMAT, "settings": there, "runs": runs}
    out.write_text(json.dumps(state))
    assert _load_state(out, here, update=False)["runs"] == runs  # a report: nothing to measure
    with pytest.raises(SystemExit, match="other settings \\(target"):
        _load_state(out, here)  # new runs would mix CPUs
    state["runs"].append({"task": "t", "arm": "ppo", "seed": 0})
    out.write_text(json.dumps(state))
    with pytest.raises(SystemExit, match="1 of its runs are not re-timed yet, which only its own CPU can do"):
        _load_state(out, here, update=False)
