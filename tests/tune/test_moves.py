"""Action units and their moves: a tile move shifts one prime factor between adjacent levels, every tiling is
reachable, the knob's limits hold, and the cheap views (tokens, draft features) say what the vector is."""
from collections import deque

import numpy as np
import pytest

from tvm_rl.tune import knobs
from tvm_rl.tune.draft import DraftModel
from tvm_rl.tune.moves import DECREASE, INCREASE, KEEP, UNIT_FEATURES, MoveSpace, _primes


def test_primes():
    assert _primes(1) == () and _primes(12) == (2, 3) and _primes(97) == (97,) and _primes(2 * 7 * 7 * 13) == (2, 7, 13)


def test_units_are_tile_boundaries_and_other_knobs(space):
    moves = MoveSpace(space)
    expected = sum(len(k.values[0]) - 1 if k.kind == knobs.TILE else 1 for k in space.knobs)
    assert moves.size == expected
    assert {b for _, b in moves.units if b >= 0} and any(b < 0 for _, b in moves.units)


def test_a_tile_move_shifts_one_prime_between_adjacent_levels(space):
    moves = MoveSpace(space)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(40):
        vec = space.random(rng)
        for u, (knob, boundary) in enumerate(moves.units):
            if boundary < 0:
                continue
            for action, (src, dst) in ((INCREASE, (boundary, boundary + 1)), (DECREASE, (boundary + 1, boundary))):
                actions = np.full(moves.size, KEEP)
                actions[u] = action
                after = moves.move(vec, actions, rng)
                others = [i for i in range(space.size) if i != knob]
                assert np.array_equal(after[others], vec[others])
                old = np.array(space.knobs[knob].values[vec[knob]])
                new = np.array(space.knobs[knob].values[after[knob]])
                if after[knob] == vec[knob]:  # blocked: nothing to move, or the limit forbids every move
                    assert not moves.neighbours(knob, int(vec[knob]), boundary, 1 if action == INCREASE else -1)
                    continue
                ratio = new[dst] // old[dst]
                assert new[dst] == old[dst] * ratio and old[src] == new[src] * ratio and ratio in _primes(old[src])
                assert np.array_equal(np.delete(new, [src, dst]), np.delete(old, [src, dst]))
                checked += 1
    assert checked > 100


def test_every_tiling_is_reachable_by_moves(space):
    moves = MoveSpace(space)
    tiles = [k for k in space.knobs if k.kind == knobs.TILE]
    knob = max(tiles, key=lambda k: k.cardinality)
    boundaries = [b for k, b in moves.units if k == knob.position]
    reached, todo = {knob.default}, deque([knob.default])
    while todo:
        i = todo.popleft()
        for b in boundaries:
            for d in (1, -1):
                for j in moves.neighbours(knob.position, i, b, d):
                    if j not in reached:
                        reached.add(j)
                        todo.append(j)
    assert reached == set(range(knob.cardinality))


def test_non_tile_units_step_their_index_and_stop_at_the_ends(space):
    moves = MoveSpace(space)
    rng = np.random.default_rng(1)
    top = space.cardinalities - 1
    for u, (knob, boundary) in enumerate(moves.units):
        if boundary >= 0:
            continue
        actions = np.full(moves.size, KEEP)
        actions[u] = INCREASE
        assert np.array_equal(moves.move(top, actions, rng), top)
        assert moves.move(np.zeros(space.size, np.int64), actions, rng)[knob] == 1
        actions[u] = DECREASE
        assert moves.move(np.zeros(space.size, np.int64), actions, rng)[knob] == 0


def test_random_walks_stay_in_range_and_wrong_actions_are_refused(space):
    moves = MoveSpace(space)
    rng = np.random.default_rng(2)
    vec = space.default()
    for _ in range(300):
        vec = moves.move(vec, rng.integers(0, 3, moves.size), rng)
        assert np.all((vec >= 0) & (vec < space.cardinalities))
    with pytest.raises(knobs.KnobError, match="one per unit"):
        moves.move(vec, np.ones(moves.size + 1, int), rng)


def test_tokens_and_draft_features_describe_the_vector(space):
    moves = MoveSpace(space)
    rng = np.random.default_rng(3)
    vecs = np.stack([space.random(rng) for _ in range(6)])
    tokens = moves.tokens(vecs)
    assert tokens.shape == (6, moves.size, UNIT_FEATURES) and np.all(np.isfinite(tokens))
    can = moves.can_move(vecs)
    assert np.array_equal(tokens[..., 8:10].astype(bool), can)
    feats = moves.draft_features(vecs)
    col = 0
    for knob in space.knobs:
        if knob.kind == knobs.TILE:
            width = len(knob.values[0])
            expect = np.log2([knob.values[i] for i in vecs[:, knob.position]])
            assert np.allclose(feats[:, col:col + width], expect)
            col += width
        else:
            col += 1
    assert feats.shape == (6, col)


def test_draft_model_ranks_unseen_points_of_a_smooth_score(space):
    moves = MoveSpace(space)
    rng = np.random.default_rng(4)
    vecs = np.stack([space.random(rng) for _ in range(400)])
    feats = moves.draft_features(vecs)
    weights = rng.normal(size=feats.shape[1])
    score = feats @ weights
    draft = DraftModel(seed=0).fit(feats[:300], score[:300])
    assert draft.fitted and draft.agreement(feats[300:], score[300:]) > 0.8
    few = DraftModel().fit(feats[:5], score[:5])
    assert not few.fitted and np.allclose(few.predict(feats[:3]), score[:5].mean())


def test_level_features_are_products_of_the_tiling_across_knobs(space):
    moves = MoveSpace(space)
    rng = np.random.default_rng(5)
    vecs = np.stack([space.random(rng) for _ in range(4)])
    tiles = [np.array([k.values[i] for i in vecs[:, k.position]]) for k in space.knobs if k.kind == knobs.TILE]
    depths = sorted({t.shape[1] for t in tiles})
    extra = moves.level_features(vecs)
    assert extra.shape == (4, sum(2 * d for d in depths) + 2)
    col = 0
    for d in depths:
        level = np.log2(np.prod([t for t in tiles if t.shape[1] == d], axis=0))  # (W, d): each level's product
        assert np.allclose(extra[:, col:col + d], level)
        # the footprint at the outermost level is every level's product: the loop nest's whole extent
        assert np.allclose(extra[:, col + d], level.sum(axis=1))
        col += 2 * d
    assert np.allclose(extra[:, -2], np.log2(np.prod([t[:, -1] for t in tiles], axis=0)))
    plain = moves.draft_features(vecs)
    assert np.array_equal(moves.draft_features(vecs, level_products=True), np.hstack([plain, extra]))
