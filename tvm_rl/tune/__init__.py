"""Operator level: kernels as tuning tasks, knob-space search strategies (PPOSearch, SimulatedAnnealing) and
tuning into a MetaSchedule database. The strategies import torch and scikit-learn, so they load on first use."""
from .rpc import RPCError, rpc_runner
from .tasks import TuneReport, extract_tasks, make_strategy, open_database, tune_model, tune_workloads

_LAZY = {"PPOSearch": ".strategy", "KnobSearch": ".strategy", "SimulatedAnnealing": ".annealing",
         "PPOAgent": ".agent", "PPOConfig": ".agent"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KnobSearch", "PPOAgent", "PPOConfig", "PPOSearch", "RPCError", "SimulatedAnnealing", "TuneReport",
           "extract_tasks", "make_strategy", "open_database", "rpc_runner", "tune_model", "tune_workloads"]
