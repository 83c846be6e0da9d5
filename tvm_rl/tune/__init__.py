"""Operator level: kernels as tuning tasks, tuned into a MetaSchedule database by a search strategy.

Laid out like MetaSchedule's own package: `search_strategy` (PPOSearch, SimulatedAnnealing, evolutionary, a
`create` registry), `runner` (builder, checked runner, RPC), `measure_callback` (progress, interrupt), the
CHAMELEON parts (`knobs`, `agent`, `sampling`) and `tasks` (extract, tune); `cost_model` loads the shipped
pre-trained model, rates with it and refines it online. What builds knowledge offline (a corpus of measured
schedules, the pre-trained model's training and evaluation, `tvm-rl corpus`) is `corpus`, which tuning never
imports. The database folder is owned by `tvm_rl.database`. The strategies import torch and scikit-learn, so they
load on first use.
"""
from ..database import open_database
from .runner.rpc import RPCError, rpc_runner
from .search_strategy import create as make_strategy
from .tasks import TuneReport, extract_tasks, tune_model, tune_workloads

_LAZY = {"PPOSearch": ".search_strategy.ppo", "KnobSearch": ".search_strategy.knob_search",
         "SimulatedAnnealing": ".search_strategy.annealing", "PPOAgent": ".agent", "PPOConfig": ".agent"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KnobSearch", "PPOAgent", "PPOConfig", "PPOSearch", "RPCError", "SimulatedAnnealing", "TuneReport",
           "extract_tasks", "make_strategy", "open_database", "rpc_runner", "tune_model", "tune_workloads"]
