"""Natural neighbours of a knob vector: the agent's action units and what each of their moves does.

A tile knob's index runs over its factorisations in lexicographic order, so +-1 on the index reaches few of the
tilings MetaSchedule's MutateTileSize reaches (moving one prime factor between two tile levels) and jumps far
where an outer level changes. Here a tile knob of n levels is n - 1 action units, one per boundary between
adjacent levels: "inward" moves one prime factor of the outer level to the inner one, "outward" the reverse,
the prime drawn uniformly among the source level's distinct primes. Every tiling is reachable by such moves,
each move changes exactly two levels by one prime, and a move whose result breaks the knob's innermost limit
is blocked (the unit stays). Categorical and compute-location knobs are one unit each, moving their index by
one (their values are ordered: unroll depths, locations outermost to innermost).

`MoveSpace` also gives two cheap views of many vectors at once, used where rating a point exactly (trace replay
plus feature extraction, tens of milliseconds) is too slow: the units' state as the policy's tokens, and
`draft_features`, the tile sizes in log2 per level plus the other knobs' normalised indices, for the draft model
(`tune.draft`) that rates walk steps in microseconds.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .knobs import COMPUTE_LOCATION, TILE, KnobError, KnobSpace

DECREASE, KEEP, INCREASE = 0, 1, 2  # a unit's action; for a tile boundary: outward, keep, inward
UNIT_FEATURES = 11


@lru_cache(maxsize=4096)
def _primes(n: int) -> tuple[int, ...]:
    """The distinct prime factors of n, ascending."""
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            out.append(p)
            while n % p == 0:
                n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


class MoveSpace:
    """The action units of one `KnobSpace` and their moves (see the module docstring)."""

    def __init__(self, space: KnobSpace) -> None:
        self.space = space
        units: list[tuple[int, int]] = []  # (knob position, boundary; -1 for a non-tile knob)
        self._tables: dict[int, np.ndarray] = {}  # tile knob -> (cardinality, levels) factors
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        for knob in space.knobs:
            if knob.kind == TILE:
                self._tables[knob.position] = np.array(knob.values, dtype=np.int64)
                self._index[knob.position] = {tuple(v): i for i, v in enumerate(knob.values)}
                units += [(knob.position, b) for b in range(len(knob.values[0]) - 1)]
            else:
                units.append((knob.position, -1))
        self.units = tuple(units)
        self._unit_knob = np.array([k for k, _ in units], dtype=np.int64)
        self._unit_boundary = np.array([b for _, b in units], dtype=np.int64)
        self._neighbours: dict[tuple[int, int, int, int], tuple[int, ...]] = {}
        self._static = self._static_tokens()

    @property
    def size(self) -> int:
        """Number of action units."""
        return len(self.units)

    # --- moves ---
    def neighbours(self, knob: int, index: int, boundary: int, direction: int) -> tuple[int, ...]:
        """Indices a tile knob at `index` reaches by moving one prime across `boundary` (+1 inward, -1
        outward), one per distinct prime of the source level that the knob's limits allow."""
        key = (knob, index, boundary, direction)
        hit = self._neighbours.get(key)
        if hit is None:
            factors = self._tables[knob][index]
            src, dst = (boundary, boundary + 1) if direction > 0 else (boundary + 1, boundary)
            found = []
            for p in _primes(int(factors[src])):
                moved = factors.copy()
                moved[src] //= p
                moved[dst] *= p
                j = self._index[knob].get(tuple(int(x) for x in moved))
                if j is not None:  # None: the innermost level would exceed its limit
                    found.append(j)
            hit = self._neighbours[key] = tuple(found)
        return hit

    def move(self, vec: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The vector after every unit's action (0 decrease/outward, 1 keep, 2 increase/inward), applied unit by
        unit in order; a blocked move (range end, no prime to move, limit) leaves its knob as it is."""
        actions = np.asarray(actions)
        if actions.shape != (self.size,):
            raise KnobError(f"actions must be {self.size} values (one per unit), got shape {actions.shape}")
        out = np.array(vec, dtype=np.int64)
        cards = self.space.cardinalities
        for (knob, boundary), action in zip(self.units, actions):
            if action == KEEP:
                continue
            direction = 1 if action == INCREASE else -1
            if boundary < 0:
                out[knob] = min(max(out[knob] + direction, 0), cards[knob] - 1)
                continue
            options = self.neighbours(knob, int(out[knob]), boundary, direction)
            if options:
                out[knob] = options[int(rng.integers(len(options)))] if len(options) > 1 else options[0]
        return out

    def can_move(self, vecs: np.ndarray) -> np.ndarray:
        """(W, units, 2) whether each unit can move outward/decrease and inward/increase from each vector."""
        vecs = np.asarray(vecs, dtype=np.int64)
        out = np.zeros((len(vecs), self.size, 2), dtype=bool)
        cards = self.space.cardinalities
        for u, (knob, boundary) in enumerate(self.units):
            if boundary < 0:
                out[:, u, 0] = vecs[:, knob] > 0
                out[:, u, 1] = vecs[:, knob] < cards[knob] - 1
                continue
            for w, index in enumerate(vecs[:, knob]):
                out[w, u, 0] = bool(self.neighbours(knob, int(index), boundary, -1))
                out[w, u, 1] = bool(self.neighbours(knob, int(index), boundary, 1))
        return out

    # --- views ---
    def _static_tokens(self) -> np.ndarray:
        """Per unit: kind one-hot (tile boundary, categorical, compute location), log2 cardinality / 8, relative
        position, boundary depth within its tile; (units, 6)."""
        rows = []
        for u, (knob, boundary) in enumerate(self.units):
            k = self.space.knobs[knob]
            levels = len(k.values[0]) if k.kind == TILE else 2
            rows.append([k.kind == TILE, k.kind not in (TILE, COMPUTE_LOCATION), k.kind == COMPUTE_LOCATION,
                         np.log2(k.cardinality) / 8.0, u / max(self.size, 1), max(boundary, 0) / (levels - 1)])
        return np.asarray(rows, dtype=np.float32).reshape(self.size, 6)

    def tokens(self, vecs: np.ndarray) -> np.ndarray:
        """The units' state for W vectors, (W, units, UNIT_FEATURES): the static part, the two levels at a tile
        boundary in log2 / 8 (a non-tile unit: its normalised index and 0), whether it can move either way, and
        log2 of the unit count / 6."""
        vecs = np.asarray(vecs, dtype=np.int64)
        w = len(vecs)
        state = np.zeros((w, self.size, 2), dtype=np.float32)
        cards = self.space.cardinalities
        for u, (knob, boundary) in enumerate(self.units):
            if boundary < 0:
                state[:, u, 0] = vecs[:, knob] / max(cards[knob] - 1, 1)
            else:
                levels = self._tables[knob][vecs[:, knob]]
                state[:, u, 0] = np.log2(levels[:, boundary]) / 8.0
                state[:, u, 1] = np.log2(levels[:, boundary + 1]) / 8.0
        static = np.broadcast_to(self._static, (w, *self._static.shape))
        count = np.full((w, self.size, 1), np.log2(max(self.size, 1)) / 6.0, dtype=np.float32)
        return np.concatenate([static, state, self.can_move(vecs).astype(np.float32), count], axis=-1)

    def draft_features(self, vecs: np.ndarray, level_products: bool = False) -> np.ndarray:
        """(W, D) features of vectors for the draft model: each tile knob's levels in log2, each other knob's
        normalised index and, with `level_products`, the tiling's products across knobs (`level_features`)."""
        vecs = np.asarray(vecs, dtype=np.int64).reshape(-1, self.space.size)
        cols = []
        cards = self.space.cardinalities
        for knob in self.space.knobs:
            if knob.kind == TILE:
                cols.append(np.log2(self._tables[knob.position][vecs[:, knob.position]]))
            else:
                cols.append((vecs[:, knob.position] / max(cards[knob.position] - 1, 1))[:, None])
        if level_products:
            cols.append(self.level_features(vecs))
        return np.concatenate(cols, axis=1) if cols else np.zeros((len(vecs), 0))

    def level_features(self, vecs: np.ndarray) -> np.ndarray:
        """log2 products across tile knobs, which trees cannot form from per-knob columns: among the knobs of
        the same depth (MetaSchedule's CPU tiling splits spatial loops 4 ways and reductions 2 ways), each
        level's product (level 0 over the spatial loops: the parallel extent) and the product of each level
        and all inside it (a tile's footprint: what must fit a register file or a cache); then the innermost
        and the two innermost levels over all knobs."""
        vecs = np.asarray(vecs, dtype=np.int64).reshape(-1, self.space.size)
        by_depth: dict[int, list[np.ndarray]] = {}
        for knob in self.space.knobs:
            if knob.kind == TILE:
                levels = np.log2(self._tables[knob.position][vecs[:, knob.position]])
                by_depth.setdefault(levels.shape[1], []).append(levels)
        if not by_depth:
            return np.zeros((len(vecs), 0))
        cols = []
        for depth in sorted(by_depth):
            level = np.sum(by_depth[depth], axis=0)  # (W, depth)
            cols += [level, np.cumsum(level[:, ::-1], axis=1)[:, ::-1]]
        every = [lv for group in by_depth.values() for lv in group]
        cols.append(np.sum([lv[:, -1] for lv in every], axis=0)[:, None])
        cols.append(np.sum([lv[:, -2:].sum(axis=1) for lv in every], axis=0)[:, None])
        return np.concatenate(cols, axis=1)


__all__ = ["DECREASE", "INCREASE", "KEEP", "MoveSpace", "UNIT_FEATURES"]
