"""The graph trainer's worker processes: each keeps its own environments, receives the current weights, plays
episodes and returns them; an interrupted or failed iteration stops them at once (`stop_workers`)."""
from __future__ import annotations

import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
from tqdm import tqdm

if TYPE_CHECKING:
    from .observation import FeatureSpec
    from .train_config import TrainConfig
    from .train_update import Episode

_WORKER_ENVS: dict = {}


def open_pool(workers: int) -> ProcessPoolExecutor:
    """`workers` spawned processes (not forked: TVM and torch hold threads and locks a fork would copy mid-use)."""
    return ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker)


def play_in_pool(pool: ProcessPoolExecutor, jobs: Sequence[tuple[str, int]], config: TrainConfig, state: dict,
                 features: FeatureSpec) -> list[Episode]:
    """One episode per (model, seed) of `jobs`, played by the policy with weights `state`, in the jobs' order."""
    # submit, not map: an interrupted map cancels its futures from this thread, behind the pool's manager thread,
    # which then fails them again when stop_workers breaks the pool (InvalidStateError in that thread)
    futures = [pool.submit(_worker_play, model, config, state, seed, features) for model, seed in jobs]
    return [f.result() for f in futures]


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel `pool`'s queued episodes and terminate the processes playing the others. An interrupt sent to this
    process alone (not its whole process group, as Ctrl-C is) would otherwise wait for them to play out."""
    terminate = getattr(pool, "terminate_workers", None)  # public from Python 3.14
    if terminate is not None:
        terminate()
        return
    # Before 3.14 ProcessPoolExecutor has no public way to stop a running task: its processes are reached through
    # _processes (which shutdown clears).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        proc.terminate()


def _init_worker() -> None:
    """Pool initializer. Ctrl-C reaches the whole process group, and a worker that took it would die with its own
    traceback: the main process decides, and terminates the workers (`stop_workers`) when it is interrupted. And
    tqdm's class lock is made a thread lock: tqdm would create a process-shared one, whose semaphore a terminated
    worker never releases (the resource tracker's "leaked semaphore" warning at exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tqdm.set_lock(threading.RLock())


def _worker_play(model: str, config: TrainConfig, state: dict, seed: int, features: FeatureSpec) -> Episode:
    from .agent import GraphActorCritic, PolicyConfig
    from .train_play import make_env, play

    torch.set_num_threads(1)
    if model not in _WORKER_ENVS:
        _WORKER_ENVS[model] = make_env(model, config, features)
    policy = GraphActorCritic(PolicyConfig(config.hidden, config.gat_layers, config.heads))
    policy.load_state_dict(state)
    return play(_WORKER_ENVS[model], policy, np.random.default_rng(seed), model)
