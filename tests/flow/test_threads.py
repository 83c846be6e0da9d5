"""tvm_rl.threads: TVM's thread pool sized to the cores, unless the user sized it."""
import os
import subprocess
import sys

from tvm_rl import threads

PROBE = "import tvm_rl, tvm; print(tvm.get_global_func('runtime.NumThreads')())"


def _threads_in_a_fresh_process(env_value: str | None, name: str = threads.THREADS_ENV) -> int:
    env = {k: v for k, v in os.environ.items() if k not in (threads.THREADS_ENV, threads.OMP_ENV)}
    if env_value is not None:
        env[name] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_importing_tvm_rl_gives_tvm_one_thread_per_core():
    assert _threads_in_a_fresh_process(None) == threads.cpu_threads()


def test_the_users_thread_count_is_kept():
    assert _threads_in_a_fresh_process("1") == 1
    assert _threads_in_a_fresh_process("1", threads.OMP_ENV) == 1  # TVM reads OpenMP's when its own is unset


def test_cores_are_the_affinity_at_most_the_physical_cores(monkeypatch):
    import psutil

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 8 if logical else 2)  # hyperthreaded
    assert threads.cpu_threads() == 2
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 8 if logical else 8)  # no SMT
    assert threads.cpu_threads() == 4  # the affinity allows 4
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: None)  # unknown
    assert threads.cpu_threads() == 4


def test_use_all_cores_sets_the_variable_only_when_unset(monkeypatch):
    monkeypatch.setattr(threads, "cpu_threads", lambda: 3)
    monkeypatch.delenv(threads.OMP_ENV, raising=False)
    monkeypatch.setenv(threads.THREADS_ENV, "5")
    assert threads.use_all_cores() is None and os.environ[threads.THREADS_ENV] == "5"
    monkeypatch.delenv(threads.THREADS_ENV)
    assert threads.use_all_cores() == 3 and os.environ[threads.THREADS_ENV] == "3"
