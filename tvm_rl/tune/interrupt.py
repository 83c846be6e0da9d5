"""Ctrl-C during tuning, reported as one TuningInterrupted that says how to resume.

MetaSchedule appends every measured record to the JSON database as soon as its batch is measured, so nothing
completed is lost when a run stops; rerunning resumes from what the database holds. What needs help is the
interrupt itself: Python raises KeyboardInterrupt wherever the main thread is, and when that is a Python
callback inside TVM's C++ task scheduler (a builder, the search strategy, XGBoost training), TVM's FFI or
XGBoost re-raise it as a RuntimeError or TVMError with a long traceback. `interruptible` notes that SIGINT
arrived, so whatever exception it turned into becomes TuningInterrupted.

Worker processes (builders, runners) are left to die of the same Ctrl-C: the tuning process waits on them in
Python, so it is interrupted before it could record a candidate whose worker died as failed; and a worker
that ignored Ctrl-C would go on (importing, compiling) for up to a minute after the run ended.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import TuningInterrupted


@contextmanager
def interruptible(message: Callable[[], str]) -> Iterator[None]:
    """Within the block, Ctrl-C raises TuningInterrupted(message()) however TVM passed it on. A second Ctrl-C
    is the default KeyboardInterrupt. Outside the main thread (where signals cannot be handled) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hit = []

    def on_sigint(signum, frame):
        hit.append(signum)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    except BaseException as err:
        if hit and not isinstance(err, TuningInterrupted):
            raise TuningInterrupted(message()) from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)


def ignore_sigint() -> None:
    """For worker processes that must finish what they are doing when Ctrl-C reaches the process group. Such a
    worker outlives an interrupted run until its current job ends and it reads its closed pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
