"""Ctrl-C (or SIGTERM) during tuning or training, reported as one TuningInterrupted that says how to resume.

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
A SIGTERM sent to the tuning process alone leaves them to exit when their pipe closes, as after a SIGKILL.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import TuningInterrupted

# SIGTERM is what `kill`, `timeout` and job schedulers send before SIGKILL: it stops a run as Ctrl-C does, so the
# sitting's seconds and the resume hint are not lost with it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_pending: list[int] = []  # stop signals seen by the innermost `interruptible` block not yet turned into its error
_deferring = [0]  # depth of `deferred` blocks: a first Ctrl-C inside one is noted, and raised when it ends


def interrupt_pending() -> bool:
    """Whether Ctrl-C arrived inside `interruptible`: a callback that catches Exception must then re-raise."""
    return bool(_pending)


@contextmanager
def interruptible(message: Callable[[], str]) -> Iterator[None]:
    """Within the block, Ctrl-C or SIGTERM raises TuningInterrupted(message()) however TVM passed it on, with
    `signum` the signal. A second Ctrl-C is the default KeyboardInterrupt, a second SIGTERM ends the process. If
    the block ends normally all the same (every trial was measured before a swallowed interrupt surfaced), its work
    is complete and nothing is raised. Outside the main thread (where signals cannot be handled) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def on_signal(signum, frame):
        _pending.append(signum)
        # A second Ctrl-C is the default KeyboardInterrupt, a second kill the default termination.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not _deferring[0]:
            raise KeyboardInterrupt

    outer = list(_pending)
    _pending.clear()
    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    try:
        yield
    except BaseException as err:
        if _pending and not isinstance(err, TuningInterrupted):
            stopped = TuningInterrupted(message())
            stopped.signum = _pending[0]
            raise stopped from None
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
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
