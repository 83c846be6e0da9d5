"""Search strategies by name: `create("ppo" | "ppo-topk" | "evolutionary" | "annealing" | "random")`.

Each entry is a factory `(seed, walks, evaluations) -> ms.SearchStrategy`; `register` adds one (a user's own
strategy becomes a `--strategy` choice of `tvm-rl tune`). `walks` (PPO's walks or annealing's chains) and
`evaluations` (points the cost model rates per round) set the knob-space strategies' effort per round; None
keeps their defaults; strategies without such knobs ignore them. The knob-space strategies import torch and
scikit-learn, so their modules load when first created.
"""
from __future__ import annotations

from typing import Callable

from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError
from .evolutionary import evolutionary, is_evolutionary

Factory = Callable[[int, "int | None", "int | None"], ms.SearchStrategy]
_REGISTRY: dict[str, Factory] = {}

# What `create(None)`, `tvm_rl.optimize`, `tvm-rl optimize` and `tvm-rl tune` use when no strategy is named: the
# arm the committed tuner benchmark measured best (tests/tune/test_default_strategy.py holds it to that). With the
# shipped pre-trained cost model, evolutionary search beat PPOSearch with the same model (docs/results/tuner.md).
DEFAULT = "evolutionary"


def register(name: str, factory: Factory) -> None:
    """Make `create(name, ...)` call `factory(seed, walks, evaluations)`."""
    _REGISTRY[name] = factory


def names() -> tuple[str, ...]:
    """The registered strategy names, in registration order (the CLI's choices)."""
    return tuple(_REGISTRY)


def create(name: str | ms.SearchStrategy | None, seed: int = 0, walks: int | None = None,
           evaluations: int | None = None) -> ms.SearchStrategy:
    """A search strategy by name (None: `DEFAULT`), or the strategy itself when given one."""
    if name is None:
        name = DEFAULT
    if not isinstance(name, str):
        return name
    factory = _REGISTRY.get(name)
    if factory is None:
        raise TvmRlError(f"unknown search strategy {name!r}; choose one of {', '.join(_REGISTRY)}")
    return factory(seed, walks, evaluations)


def _ppo(adaptive: bool) -> Factory:
    def make(seed: int, walks: int | None, evaluations: int | None) -> ms.SearchStrategy:
        from ..agent import PPOConfig
        from .ppo import PPOSearch

        effort = {k: v for k, v in (("walks", walks), ("max_evaluations", evaluations)) if v is not None}
        return PPOSearch(adaptive=adaptive, config=PPOConfig(seed=seed, **effort), seed=seed)

    return make


def _annealing(seed: int, walks: int | None, evaluations: int | None) -> ms.SearchStrategy:
    from .annealing import SimulatedAnnealing

    effort = {k: v for k, v in (("chains", walks), ("max_evaluations", evaluations)) if v is not None}
    return SimulatedAnnealing(seed=seed, **effort)


register("evolutionary", evolutionary)
register("ppo", _ppo(adaptive=False))
register("ppo-adaptive", _ppo(adaptive=True))
register("ppo-topk", _ppo(adaptive=False))  # what "ppo" is now; kept so scripts that name it still run
register("annealing", _annealing)
register("random", lambda seed, walks, evaluations: ms.search_strategy.ReplayTrace())

__all__ = ["DEFAULT", "create", "evolutionary", "is_evolutionary", "names", "register"]
