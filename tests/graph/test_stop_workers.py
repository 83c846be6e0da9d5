"""`train.stop_workers`: an interrupted training run must not wait for its workers' episodes to play out."""
import time
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import psutil

from tvm_rl.graph.train_pool import stop_workers


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether process `pid` has exited (or is a zombie) within `seconds`. Not `Process.join`/`is_alive`: the pool's
    manager thread reaps its workers too, and `is_alive` reads a pid another thread reaped as still alive."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_running_worker_is_terminated_and_a_queued_task_never_runs():
    pool = ProcessPoolExecutor(max_workers=1)
    running = pool.submit(time.sleep, 60)
    queued = pool.submit(time.sleep, 60)
    deadline = time.monotonic() + 30
    while not running.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    processes = list(pool._processes.values())
    start = time.monotonic()
    stop_workers(pool)
    for proc in processes:
        assert _ends_within(proc.pid, 10), f"worker {proc.pid} still runs"
    # The queued task is cancelled, or fails with the broken pool if it had reached the call queue: never run.
    # (`wait` is not used: a future cancelled after the pool's manager thread has gone stays CANCELLED, never
    # CANCELLED_AND_NOTIFIED, and `wait` counts only the latter as done.)
    deadline = time.monotonic() + 10
    while not queued.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queued.cancelled() or (queued.done() and queued.exception() is not None)
    assert time.monotonic() - start < 10


def test_the_public_terminate_workers_is_used_where_python_has_it():
    calls = []
    pool = SimpleNamespace(terminate_workers=lambda: calls.append("terminate"),
                           shutdown=lambda **kw: calls.append("shutdown"))
    stop_workers(pool)  # type: ignore[arg-type]
    assert calls == ["terminate"]


def _worker_state() -> tuple[bool, bool]:
    import signal

    from tqdm import tqdm
    from tqdm.std import TqdmDefaultWriteLock  # the lock tqdm makes itself, around a multiprocessing.RLock
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN, isinstance(tqdm.get_lock(), TqdmDefaultWriteLock)


def test_workers_leave_ctrl_c_to_the_main_process_and_hold_no_process_shared_tqdm_lock():
    """Ctrl-C reaches the whole process group: a worker that took it died with its own traceback, and one terminated
    by stop_workers leaked tqdm's process-shared semaphore (the resource tracker's warning at exit)."""
    import os
    import signal
    from multiprocessing import get_context

    from tvm_rl.graph.train_pool import _init_worker

    with ProcessPoolExecutor(1, mp_context=get_context("fork"), initializer=_init_worker) as pool:
        ignores, tqdm_default_lock = pool.submit(_worker_state).result(timeout=60)
        (pid,) = pool._processes
        os.kill(pid, signal.SIGINT)
        assert pool.submit(_worker_state).result(timeout=60)[0]  # the same worker lived through it
        assert list(pool._processes) == [pid]
    assert ignores
    assert not tqdm_default_lock
