"""CHAMELEON's adaptive sampling: the knee of the inertia curve, best-scored representatives, budget and
exploration share, duplicates, determinism; and the batch selection of knob-space searches built on it."""
import numpy as np
import pytest
from sklearn.datasets import make_blobs

from tvm_rl.tune.sampling import adaptive_sample, knee
from tvm_rl.tune.search_strategy.selection import cluster_top, head_size, top_k


def blobs(k: int, seed: int, n: int = 300, dims: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """k well-separated clusters: centres on the corners of a simplex 10 apart, spread 0.5."""
    centres = 10 / np.sqrt(2) * np.eye(k, dims)
    return make_blobs(n_samples=n, centers=centres, cluster_std=0.5, random_state=seed)


def test_knee_of_a_bent_curve():
    ks = list(range(1, 11))
    assert knee(ks, [100, 30, 10, 8, 7, 6, 5, 4.5, 4, 3.8]) == 3
    assert knee(ks, [100, 95, 90, 20, 18, 16, 15, 14, 13, 12]) == 4
    # An uneven grid of ks (as for large budgets) is measured on the k axis, not by position.
    assert knee([1, 2, 4, 8, 16], [100, 50, 10, 8, 6]) == 4


def test_knee_of_flat_straight_and_short_curves_is_the_first_k():
    assert knee([1, 2, 3, 4], [5, 5, 5, 5]) == 1
    assert knee([1, 2, 3, 4], [4, 3, 2, 1]) == 1
    assert knee([2, 3], [10, 1]) == 2
    with pytest.raises(ValueError):
        knee([1, 2, 3], [3, 2])
    with pytest.raises(ValueError):
        knee([3, 2, 1], [3, 2, 1])


@pytest.mark.parametrize("k", [3, 4, 5])
def test_knee_finds_the_clusters_and_picks_the_best_of_each(k):
    for seed in range(3):
        points, truth = blobs(k, seed)
        scores = np.random.default_rng(seed).normal(size=len(points))
        chosen = adaptive_sample(points, scores, budget=32, rng=np.random.default_rng(seed), explore_frac=0)
        assert len(chosen) == k
        # one per true cluster, and each the best-scored member of its cluster
        assert sorted(truth[chosen]) == list(range(k))
        for i in chosen:
            assert scores[i] == scores[truth == truth[i]].max()
        assert [scores[i] for i in chosen] == sorted((scores[i] for i in chosen), reverse=True)


def test_budget_and_exploration_share():
    points, truth = blobs(4, 0)
    scores = np.random.default_rng(0).normal(size=len(points))
    for budget in range(1, 25):
        chosen = adaptive_sample(points, scores, budget, np.random.default_rng(1), explore_frac=0.25)
        assert len(chosen) <= budget and len(set(chosen)) == len(chosen)
    chosen = adaptive_sample(points, scores, 20, np.random.default_rng(1), explore_frac=0.25)
    assert len(chosen) == 4 + 5  # four clusters, then round(20 * 0.25) random others
    cluster_best = chosen[:4]
    assert all(scores[i] == scores[truth == truth[i]].max() for i in cluster_best)
    assert not set(chosen[4:]) & set(cluster_best)
    # A budget below the number of clusters caps k instead of overspending.
    assert len(adaptive_sample(points, scores, 2, np.random.default_rng(1), explore_frac=0)) <= 2
    assert adaptive_sample(points, scores, 0, np.random.default_rng(1)) == []


def test_identical_points_form_one_cluster():
    points = np.ones((50, 4))
    scores = np.arange(50.0)
    assert adaptive_sample(points, scores, 16, np.random.default_rng(0)) == [49]


def test_duplicates_count_once_keeping_the_best_copy():
    points, _ = blobs(3, 1, n=60)
    doubled = np.concatenate([points, points])
    scores = np.concatenate([np.zeros(60), np.ones(60)])  # the copies score better
    chosen = adaptive_sample(doubled, scores, 40, np.random.default_rng(0), explore_frac=0.5)
    assert all(i >= 60 for i in chosen)
    assert len({tuple(doubled[i]) for i in chosen}) == len(chosen)


def test_few_distinct_points_give_few_samples():
    points = np.repeat(np.array([[0.0, 0.0], [1.0, 1.0]]), 20, axis=0)
    chosen = adaptive_sample(points, np.zeros(40), 16, np.random.default_rng(0))
    assert sorted(chosen) == [0, 20]


def test_deterministic_with_a_seed_and_nan_scores_are_worst():
    points, _ = blobs(5, 2)
    scores = np.random.default_rng(2).normal(size=len(points))
    scores[::7] = np.nan
    a = adaptive_sample(points, scores, 24, np.random.default_rng(7))
    b = adaptive_sample(points, scores, 24, np.random.default_rng(7))
    assert a == b
    assert not any(np.isnan(scores[i]) for i in a[:5])
    with pytest.raises(ValueError):
        adaptive_sample(points, scores[:-1], 8, np.random.default_rng(0))


# --- the batch selection of knob-space searches (search_strategy.selection) ---


def two_regions(seed: int, m: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points in two far-apart regions (think: two design spaces), every point of the first rated above every
    point of the second. Returns features, scores and which region each point is in (True: the first)."""
    rng = np.random.default_rng(seed)
    first = np.r_[np.ones(m, bool), np.zeros(m, bool)]
    features = rng.random((2 * m, 4)) + np.where(first, 0.0, 5.0)[:, None]
    scores = rng.random(2 * m) + first
    return features, scores, first


@pytest.mark.parametrize("seed", range(3))
def test_cluster_top_gives_the_batch_to_the_higher_rated_region(seed):
    features, scores, first = two_regions(seed)
    for n, explore in [(8, 0.0), (16, 0.0), (16, 0.05), (32, 0.1)]:
        chosen = cluster_top(features, scores, n, np.random.default_rng(seed), explore_fraction=explore, k_min=n // 2)
        assert len(chosen) == n == len(set(chosen))
        assert first[chosen].sum() >= n - int(n * explore + 0.5)  # only the random share may go elsewhere


def test_cluster_top_takes_the_best_of_each_cluster_of_the_top():
    # The top holds two tight groups: A rated 10-11, B just below (9-10); a far group C is rated low. Top-k
    # measures only A; clustering the top also measures B's best, never C.
    rng = np.random.default_rng(0)
    centres = {"A": 0.0, "B": 3.0, "C": 9.0}
    groups = np.repeat(list(centres), [40, 40, 40])
    features = rng.normal(0, 0.05, (120, 3)) + np.array([centres[g] for g in groups])[:, None]
    scores = rng.random(120) + np.select([groups == "A", groups == "B"], [10.0, 9.0], 0.0)
    chosen = cluster_top(features, scores, 8, np.random.default_rng(0), explore_fraction=0.0, k_min=2)
    assert len(chosen) == 8 and set(groups[chosen]) == {"A", "B"}
    for g in ("A", "B"):
        assert int(np.flatnonzero(groups == g)[np.argmax(scores[groups == g])]) in chosen
    assert set(groups[top_k(scores, 8, np.random.default_rng(0), explore_fraction=0.0)]) == {"A"}


def test_selection_fills_the_batch_from_any_pool():
    features, scores, _ = two_regions(0, m=5)
    rng = np.random.default_rng(0)
    for rule in (lambda n: cluster_top(features, scores, n, rng, 0.05, k_min=n // 2),
                 lambda n: top_k(scores, n, rng, 0.05)):
        assert sorted(rule(10)) == list(range(10))  # a pool of 10: all of it
        assert sorted(rule(30)) == list(range(10))
        assert len(set(rule(7))) == 7 and rule(0) == []
    # top-k's best share is exactly the best-rated points
    assert top_k(scores, 7, rng, 0.3)[:5] == np.argsort(-scores)[:5].tolist()


def test_head_size_stays_in_the_better_half_of_the_pool():
    assert head_size(16, 10_000) == 64 and head_size(8, 10_000) == 64 and head_size(32, 10_000) == 128
    assert head_size(16, 46) == 32  # the better half would be 23: at least 2 n
    assert head_size(8, 100) == 50 and head_size(8, 10) == 10
