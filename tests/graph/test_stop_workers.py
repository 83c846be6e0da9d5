"""`train.stop_workers`: an interrupted training run must not wait for its workers' episodes to play out."""
import time
from concurrent.futures import ProcessPoolExecutor, wait
from types import SimpleNamespace

from tvm_rl.graph.train import stop_workers


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
        proc.join(timeout=10)
        assert not proc.is_alive()
    # The queued task is cancelled, or fails with the broken pool if it had reached the call queue: never run.
    assert not wait([queued], timeout=10).not_done
    assert time.monotonic() - start < 10


def test_the_public_terminate_workers_is_used_where_python_has_it():
    calls = []
    pool = SimpleNamespace(terminate_workers=lambda: calls.append("terminate"),
                           shutdown=lambda **kw: calls.append("shutdown"))
    stop_workers(pool)  # type: ignore[arg-type]
    assert calls == ["terminate"]
