"""A real `tvm-rl tune` run stopped with Ctrl-C (SIGINT to its process group) and killed with SIGKILL loses no
completed measurement, and the same command resumes and finishes the budget without measuring anything twice."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tvm_ffi

from tvm_rl.errors import TuningInterrupted, exit_code
from tvm_rl.interrupt import interrupt_pending, interruptible
from tvm_rl.tune.measure_callback import StopOnInterrupt

REPO = Path(__file__).resolve().parents[2]
TOPHUB = REPO.parent / "shared" / "tophub"
# Small PPO rounds (--walks, --evaluations): the default ones take tens of seconds each on two cores.
TRIALS, PER_ITER = 8, 2  # four batches: a first record written late (failed trials before it) still leaves some


def command(work_dir: Path, strategy: str = "evolutionary") -> list[str]:
    return [sys.executable, "-m", "tvm_rl.cli", "tune", "--tophub", "--tophub-dir", str(TOPHUB), "--ops",
            "batch_matmul", "--max-tasks", "1", "--trials", str(TRIALS), "--per-iter", str(PER_ITER), "--walks", "16",
            "--evaluations", "32", "--strategy", strategy, "--work-dir", str(work_dir)]


def records(work_dir: Path) -> list[str]:
    """The database's whole records (a line a killed run cut short is not one: the next run moves it aside)."""
    path = work_dir / "database_tuning_record.json"
    return [line for line in path.read_text().splitlines() if _whole(line)] if path.is_file() else []


def _whole(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except json.JSONDecodeError:
        return False


class Run:
    """`tvm-rl tune` in a session of its own, so the test can signal its group and clean up only its processes."""

    def __init__(self, work_dir: Path, strategy: str = "evolutionary"):
        self.proc = subprocess.Popen(command(work_dir, strategy), cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)

    def wait_for(self, work_dir: Path, more_than: int, timeout: float = 400) -> None:
        deadline = time.monotonic() + timeout
        while len(records(work_dir)) <= more_than:
            assert self.proc.poll() is None, f"the run ended before measuring:\n{self.proc.communicate()}"
            assert time.monotonic() < deadline, "no new record in time"
            time.sleep(0.2)

    def finish(self, timeout: float = 600) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def wait_group_gone(self, timeout: float = 60) -> list[str]:
        """Processes of the run's session still there after up to `timeout` s (its workers exit on their own)."""
        deadline = time.monotonic() + timeout
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.group_alive()

    def group_alive(self) -> list[str]:
        """Processes still in the run's session (its workers, if they outlived it)."""
        found = subprocess.run(["pgrep", "-s", str(self.proc.pid)], capture_output=True, text=True).stdout
        return found.split()

    def cleanup(self) -> None:
        if self.group_alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def ctrl_c_once_a_batch_is_in(work: Path, strategy: str, timeout: float, stop: int = signal.SIGINT) -> list[str]:
    """Ctrl-C (the terminal signals the whole process group) once a batch is in the database, or with `stop`
    SIGTERM to the tuning process alone (`kill PID`); the run must stop with 128 + the signal, say how to resume,
    leave no worker behind and keep its records, which are returned."""
    run = Run(work, strategy)
    try:
        run.wait_for(work, more_than=0)
        if stop == signal.SIGINT:
            os.killpg(run.proc.pid, signal.SIGINT)
        else:
            run.proc.send_signal(stop)
        code, out, err = run.finish(timeout=timeout)
        lingering = run.wait_group_gone(timeout=15)
    finally:
        run.cleanup()
    assert code == 128 + stop, (out, err[-3000:])
    assert not lingering, "worker processes outlived the interrupted run"
    assert "Traceback" not in err and "Run the same command again to resume" in err
    kept = records(work)
    assert f"the {len(kept)} measured records so far are kept in" in err
    return kept


@pytest.mark.slow
def test_kill_during_ppo_search_stops_cleanly(tmp_path):
    """PPOSearch, an option beside the default, stops as the default does on Ctrl-C (below), here on a plain
    `kill` (SIGTERM to the tuning process alone, as `timeout` and job schedulers send): before SIGTERM was
    handled, it ended the process with no hint, and a benchmark lost the stopped sitting's seconds."""
    if not TOPHUB.is_dir():
        pytest.skip(f"no TopHub logs at {TOPHUB}")
    ctrl_c_once_a_batch_is_in(tmp_path / "db", "ppo", timeout=120, stop=signal.SIGTERM)


@pytest.mark.slow
def test_sigint_then_sigkill_lose_nothing_and_rerun_resumes(tmp_path):
    """With the default strategy, evolutionary search. It runs its search in TVM's C++, whose parallel rating
    calls back into Python: a KeyboardInterrupt raised there ended the process with std::terminate (a segfault,
    exit -11); the interrupt now waits for the round (`interrupt.deferred`). Resumed, it measured schedules of the
    earlier sittings again (6 distinct of 10) until SkipMeasured also keyed the database's records by trace."""
    if not TOPHUB.is_dir():
        pytest.skip(f"no TopHub logs at {TOPHUB}")
    work = tmp_path / "db"
    # 1. Ctrl-C once a batch is in the database.
    after_sigint = ctrl_c_once_a_batch_is_in(work, "evolutionary", timeout=180)
    assert all(json.loads(line)[1][1][0] < 1 for line in after_sigint)  # no candidate failed by the interrupt

    # 2. The same command resumes; SIGKILL (to the tuning process alone, as the OOM killer would) mid-way.
    run = Run(work)
    try:
        run.wait_for(work, more_than=len(after_sigint))
        run.proc.kill()
        code, _, _ = run.finish(timeout=60)
        orphans = run.wait_group_gone()  # its workers see their pipe close and exit
    finally:
        run.cleanup()
    assert code == -signal.SIGKILL
    assert not orphans, "worker processes outlived the killed run"
    after_sigkill = records(work)
    assert after_sigkill[: len(after_sigint)] == after_sigint and len(after_sigkill) > len(after_sigint)

    # 3. Once more, to the end: only what is left of the budget is measured, and nothing twice.
    run = Run(work)
    try:
        code, out, err = run.finish()
    finally:
        run.cleanup()
    assert code == 0, (out, err)
    final = records(work)
    assert final[: len(after_sigkill)] == after_sigkill
    left = TRIALS - len(after_sigkill)
    assert (f"of {left} trials measured" if left else f"already had {TRIALS} trials") in out
    assert len(final) <= TRIALS
    traces = [json.dumps(json.loads(line)[1][0]) for line in final]
    assert len(set(traces)) == len(traces)


def test_an_interrupt_a_callback_swallowed_still_stops_the_run_at_the_next_batch():
    """TVM hands Ctrl-C in a Python callback back as a RuntimeError, which a callback catching Exception (the knob
    decoder replaying a trace) swallows; that happened on a CI run, which then measured to the end."""
    call_through_tvm = tvm_ffi.get_global_func("testing.apply")
    # Whatever SIGINT did before (Python's handler; SIG_IGN when the tests run as a background job) is restored.
    before = signal.getsignal(signal.SIGINT)

    def callback():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises here, long before the sleep ends

    with pytest.raises(TuningInterrupted, match="the hint"):
        with interruptible(lambda: "the hint"):
            with pytest.raises(RuntimeError):
                call_through_tvm(callback)
            assert interrupt_pending()
            StopOnInterrupt().apply(None, 0, [], [], [])
    assert not interrupt_pending()
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_stops_a_block_as_ctrl_c_does_and_names_its_signal():
    """`kill`, `timeout` and job schedulers send SIGTERM first: inside `interruptible` it becomes the same
    TuningInterrupted (the resume hint, the sitting's seconds kept by callers) instead of ending the process."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(TuningInterrupted, match="the hint") as stopped:
        with interruptible(lambda: "the hint"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
    assert stopped.value.signum == signal.SIGTERM
    assert exit_code(stopped.value) == 143 and exit_code(KeyboardInterrupt()) == 130
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_killed_process_reports_the_hint_and_exits_143():
    """The whole path in a process of its own: the hint on stderr, exit status 128 + SIGTERM."""
    script = ("import sys, time\n"
              "from tvm_rl.errors import exit_code\n"
              "from tvm_rl.interrupt import interruptible\n"
              "try:\n"
              "    with interruptible(lambda: 'run it again to resume'):\n"
              "        print('ready', flush=True)\n"
              "        time.sleep(60)\n"
              "except KeyboardInterrupt as err:\n"
              "    print(err, file=sys.stderr)\n"
              "    sys.exit(exit_code(err))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "run it again to resume" in err and "Traceback" not in err
