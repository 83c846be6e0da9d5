"""The one memory bound shared by the process-wide caches that keep TVM objects alive.

Pricing, keying and rewriting graphs memoise per TVM object, keyed by the object's address; each entry holds
its object so the address cannot be reused while cached. An entry can hold a model's weights: a rewrite of a
fully connected layer makes a new 400 MB constant on VGG-16, and caches bounded by entry count alone kept
every such copy alive (a backtracking search grew by 0.55 GB an expansion and was OOM-killed at 24 GB).

The weights a rewrite creates are the only memory such caches can hold beyond the model's own (unchanged
weights are shared by every graph), so the rewrites report the bytes of each constant they make
(`created`), and once `BUDGET` bytes were made since the last flush every registered cache is cleared. The
caches then hold at most `BUDGET` bytes of new weights; a flush costs only recomputation.
"""
from __future__ import annotations

import functools
from typing import Callable, MutableMapping

BUDGET = 2 << 30  # bytes of new constants made between flushes

_CACHES: list[MutableMapping] = []
_CREATED = [0]
_FLUSHES = [0]


def cache(mapping: MutableMapping) -> MutableMapping:
    """Register `mapping` (entries that keep TVM objects alive) to be cleared by `flush`; returns it."""
    _CACHES.append(mapping)
    return mapping


def per_object(limit: int = 8192) -> Callable[[Callable], Callable]:
    """Decorator: `fn(*objects)` remembered by the objects' addresses, in a cache registered here.

    Each entry holds its objects so an address cannot be reused while cached (TVM's `==` on expressions is slow,
    so lookups go by address); the cache is cleared when it passes `limit` entries, and by `flush`."""
    def wrap(fn: Callable) -> Callable:
        entries: dict = cache({})

        @functools.wraps(fn)
        def remembered(*objects):
            key = objects[0].__chandle__() if len(objects) == 1 else tuple(o.__chandle__() for o in objects)
            hit = entries.get(key)
            if hit is None:
                if len(entries) > limit:
                    entries.clear()
                hit = entries[key] = (objects, fn(*objects))
            return hit[1]

        return remembered
    return wrap


def created(nbytes: int) -> None:
    """Note that a rewrite made a constant of `nbytes`; flush the caches once `BUDGET` is passed."""
    _CREATED[0] += int(nbytes)
    if _CREATED[0] > BUDGET:
        flush()


def flush() -> None:
    """Clear every registered cache (they are memos: only recomputation is lost)."""
    for mapping in _CACHES:
        mapping.clear()
    _CREATED[0] = 0
    _FLUSHES[0] += 1


def flushes() -> int:
    """How many flushes there have been: a cache owned by an object (not registered, so that it dies with its
    owner) clears itself when this changes, and so keeps no more new weights alive than the registered ones."""
    return _FLUSHES[0]
