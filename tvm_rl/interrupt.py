"""Ctrl-C during tuning or training, reported as one TuningInterrupted that says how to resume.

MetaSchedule appends every measured record to the JSON database as soon as its batch is measured, so nothing
completed is lost when a run stops; rerunning resumes from what the database holds. What needs help is the
interrupt itself: Python raises KeyboardInterrupt wherever the main thread is, and when that is a Python
callback inside TVM's C++ task scheduler (a builder, the search strategy, XGBoost training), TVM's FFI or
XGBoost re-raise it as a RuntimeError or TVMError with a long traceback. `interruptible` notes that SIGINT
arrived, so whatever exception it turned into becomes TuningInterrupted.

A Python callback that catches Exception around a call into TVM (the knob decoder replaying a trace, for
one) can swallow the interrupt, since TVM hands it back as a RuntimeError. So the signal also leaves a flag:
such callbacks re-raise while it is set (`interrupt_pending`), and `tune.measure_callback.StopOnInterrupt`, the first
measure callback of every batch, stops the run there at the latest.

Worker processes (builders, runners) are left to die of the same Ctrl-C: the tuning process waits on them in
Python, so it is interrupted before it could record a candidate whose worker died as failed; and a worker
that ignored Ctrl-C would go on (importing, compiling) for up to a minute after the run ended.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import TuningInterrupted

_pending: list[int] = []  # SIGINTs seen by the innermost `interruptible` block not yet turned into its error
_deferring = [0]  # depth of `deferred` blocks: a first Ctrl-C inside one is noted, and raised when it ends


def interrupt_pending() -> bool:
    """Whether Ctrl-C arrived inside `interruptible`: a callback that catches Exception must then re-raise."""
    return bool(_pending)


@contextmanager
def interruptible(message: Callable[[], str]) -> Iterator[None]:
    """Within the block, Ctrl-C raises TuningInterrupted(message()) however TVM passed it on. A second Ctrl-C
    is the default KeyboardInterrupt. If the block ends normally all the same (every trial was measured before
    a swallowed interrupt surfaced), its work is complete and nothing is raised. Outside the main thread (where
    signals cannot be handled) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def on_sigint(signum, frame):
        _pending.append(signum)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if not _deferring[0]:
            raise KeyboardInterrupt

    outer = list(_pending)
    _pending.clear()
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    except BaseException as err:
        if _pending and not isinstance(err, TuningInterrupted):
            raise TuningInterrupted(message()) from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        _pending[:] = outer


@contextmanager
def deferred() -> Iterator[None]:
    """Within the block, a first Ctrl-C that `interruptible` handles is only noted; it is raised as
    KeyboardInterrupt when the block ends. For calls into TVM's C++ that run Python callbacks inside parallel
    regions (MetaSchedule's EvolutionarySearch rating and mutating its population), where an exception
    reaching C++ ends the process with std::terminate instead of unwinding. A second Ctrl-C is raised at once."""
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1
    if not _deferring[0] and _pending:
        raise KeyboardInterrupt


def ignore_sigint() -> None:
    """For worker processes that must finish what they are doing when Ctrl-C reaches the process group. Such a
    worker outlives an interrupted run until its current job ends and it reads its closed pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
