"""Search baselines: greedy, TASO-style backtracking and random rollouts keep the function, never raise the
cost, and are deterministic."""
import pytest
import tvm_ffi

from tests.support import graph_examples as T
from tvm_rl import models
from tvm_rl.graph import cost, profiles, roofline, search
from tvm_rl.graph.verify import compare_variants

HW = roofline.default_hardware("llvm")
SEARCHES = {
    "greedy": lambda mod, c, **kw: search.greedy(mod, c, **kw),
    "backtracking": lambda mod, c, **kw: search.backtracking(mod, c, budget=6, **kw),
    "random": lambda mod, c, **kw: search.random_rollouts(mod, c, rollouts=3, horizon=4, seed=7, **kw),
}


def wide_merge_graph():
    """Three thin matmuls on one wide input: merged, x is read once instead of three times, which outweighs
    the split kernel TVM then runs (on narrow inputs it does not, and the proxy says so)."""
    return T.merge_matmul_graph(shape=(1, 256, 512), outs=(8, 8, 8))


GRAPHS = {"merge_matmul": wide_merge_graph, "bn": T.bn_graph, "attention": T.attention_graph,
          "enlarge": T.enlarge_graph}


@pytest.mark.parametrize("graph", GRAPHS)
def test_searches_keep_the_function_and_never_raise_the_cost(graph):
    mod = GRAPHS[graph]()
    results = {name: run(mod, cost.roofline_cost(HW)) for name, run in SEARCHES.items()}
    for name, r in results.items():
        assert r.cost <= r.initial_cost, name
        assert r.cost == pytest.approx(profiles.graph_roofline_ms(r.mod, HW))
    assert results["backtracking"].cost <= results["greedy"].cost  # it expands greedy's path first
    changed = {k: r.mod for k, r in results.items() if r.applied}
    assert changed, "every example graph has a cheaper rewrite"
    for name, cmp in compare_variants(mod, changed).items():
        assert cmp.ok, f"{name} on {graph}: max abs error {cmp.max_abs_err:.3g}"


@pytest.mark.parametrize("name", SEARCHES)
def test_searches_are_deterministic(name):
    mod = T.attention_graph()
    a, b = (SEARCHES[name](mod, cost.roofline_cost(HW)) for _ in range(2))
    assert a.applied == b.applied and tvm_ffi.structural_equal(a.mod, b.mod)


def test_random_rollouts_depend_on_the_seed_only():
    mod = models.load("squeezenet1_1", "tiny").mod
    runs = [search.random_rollouts(mod, cost.roofline_cost(HW), rollouts=2, horizon=3, seed=s, cap=16)
            for s in (0, 0)]
    assert runs[0].applied == runs[1].applied
    assert runs[0].expansions == runs[1].expansions


def test_backtracking_on_a_tiny_zoo_model_is_correct_and_not_worse():
    model = models.load("squeezenet1_1", "tiny")
    r = search.backtracking(model.mod, cost.roofline_cost(HW), budget=4, cap=24)
    assert r.cost <= r.initial_cost and r.applied and r.expansions <= 4
    cmp = compare_variants(model.mod, {"searched": r.mod}, inputs=model.inputs)["searched"]
    assert cmp.ok, f"max abs error {cmp.max_abs_err:.3g}"


def test_backtracking_keeps_the_input_when_nothing_is_cheaper():
    mod = T.merge_matmul_graph()
    r = search.backtracking(mod, lambda m: 1.0, budget=3)  # a flat cost: no candidate is strictly better
    assert r.mod is mod and r.applied == [] and r.cost == r.initial_cost


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="alpha"):
        search.backtracking(T.bn_graph(), cost.roofline_cost(HW), alpha=0.9)
    with pytest.raises(ValueError, match="budget"):
        search.backtracking(T.bn_graph(), cost.roofline_cost(HW), budget=0)


def test_confirm_keeps_a_graph_only_when_it_measures_faster():
    mod = wide_merge_graph()
    r = search.greedy(mod, cost.roofline_cost(HW))
    assert r.applied
    # A measurement that disagrees with the proxy: the searched graph is slower, so the input comes back.
    slower = search.confirm(r, mod, lambda a, b: (1.0, 2.0))
    assert slower.mod is mod and slower.applied == [] and not slower.kept
    assert slower.measured_ms == (1.0, 2.0) and slower.cost == r.initial_cost
    assert slower.rejected == (r.applied, r.cost)  # what was turned down stays on record
    faster = search.confirm(r, mod, lambda a, b: (1.0, 0.5))
    assert faster.mod is r.mod and faster.applied == r.applied and faster.kept and faster.measured_ms == (1.0, 0.5)
    unchanged = search.backtracking(mod, lambda m: 1.0, budget=2)
    assert search.confirm(unchanged, mod, lambda a, b: 1 / 0) is unchanged  # nothing to confirm, nothing measured


# ---- deadlines, and the searches as the pass's choice


@pytest.mark.parametrize("name", ["greedy", "backtracking"])
def test_a_search_past_its_deadline_stops_with_the_best_graph_so_far(name):
    import time

    def slow_cost(mod, inner=cost.roofline_cost(HW)):  # noqa: B008 -- one pricing function for every call
        time.sleep(0.01)  # pricing dominates, so a deadline a quarter of the way in cuts the search short
        return inner(mod)

    model = models.load("squeezenet1_1", "tiny")
    run = search.pass_search(name if name == "greedy" else "backtracking-20")
    full = run(model.mod, slow_cost, search.all_rules(), 24, None)
    assert full.expansions > 1 and full.applied
    stopped = run(model.mod, slow_cost, search.all_rules(), 24, time.perf_counter())
    assert stopped.expansions == 0 and stopped.mod is model.mod and stopped.cost == stopped.initial_cost
    assert stopped.stopped == "deadline" and full.stopped == ""
    part = run(model.mod, slow_cost, search.all_rules(), 24, time.perf_counter() + full.seconds / 4)
    # an abandoned step still counts as an expansion, so the graphs priced are what a deadline cuts short
    assert part.stopped == "deadline" and part.evaluations < full.evaluations
    assert part.cost <= part.initial_cost
    if part.applied:
        assert compare_variants(model.mod, {"s": part.mod}, inputs=model.inputs)["s"].ok


def test_the_pass_runs_a_search_when_its_policy_names_one():
    from tvm_rl.graph.rewrite_pass import RLRewritePass

    model = models.load("squeezenet1_1", "tiny")
    expected = search.backtracking(model.mod, cost.roofline_cost(HW), budget=4, cap=24)
    rewrite = RLRewritePass("llvm", policy="backtracking-4", cost=cost.roofline_cost(HW), confirm=False, cap=24,
                            time_budget_s=None, episodes=3)
    out = rewrite(model.mod)
    r = rewrite.last_report
    assert r.policy == "backtracking-4" and r.episodes == 1 and r.steps == expected.expansions == 4
    assert r.applied == expected.applied and tvm_ffi.structural_equal(out, expected.mod)
    assert rewrite.policy is None and rewrite.arm is None  # no network loaded, no arm run
    assert compare_variants(model.mod, {"pass": out}, inputs=model.inputs)["pass"].ok
    assert search.pass_search("backtracking") is not None and search.pass_search("greedy") is not None
    assert search.pass_search("cheapest-first") is None and search.pass_search(None) is None


@pytest.mark.parametrize("bad", ["backtracking-0", "backtracking-x", "backtracking-"])
def test_a_bad_search_budget_names_the_problem(bad):
    with pytest.raises(ValueError, match="expansions"):
        search.pass_search(bad)


def test_an_unknown_policy_name_lists_what_the_pass_takes():
    from tvm_rl.graph.agent import PolicyError
    from tvm_rl.graph.rewrite_pass import RLRewritePass

    with pytest.raises(PolicyError, match="backtracking-N"):
        RLRewritePass(policy="backtrack")


def test_the_pass_runs_its_searches_with_the_benchmarks_cap_unless_given_one(monkeypatch):
    seen = []
    monkeypatch.setattr(search, "backtracking", lambda mod, cost, **kw: seen.append(kw["cap"]))
    run = search.pass_search("backtracking-2")
    run(None, None, [], None, None)
    run(None, None, [], 8, None)
    assert seen == [search.SEARCH_CAP, 8] and search.SEARCH_CAP == 64


def test_backtracking_stops_with_its_best_graph_when_memory_runs_short(monkeypatch, caplog):
    checks = []

    def short_after_two():
        checks.append(1)
        return len(checks) > 2

    monkeypatch.setattr(search, "memory_short", short_after_two)
    model = models.load("squeezenet1_1", "tiny")
    with caplog.at_level("WARNING", logger="tvm_rl.graph"):
        r = search.backtracking(model.mod, cost.roofline_cost(HW), budget=10, cap=24)
    assert r.expansions == 2 and r.stopped == "memory"
    assert r.cost <= r.initial_cost and r.applied
    assert "stopped after 2 of 10 expansions" in caplog.text
    assert compare_variants(model.mod, {"s": r.mod}, inputs=model.inputs)["s"].ok
    monkeypatch.setattr(search, "memory_short", lambda: False)
    assert search.backtracking(model.mod, cost.roofline_cost(HW), budget=3, cap=24).stopped == ""


def test_the_memory_check_reads_the_machines_available_share(monkeypatch):
    class VM:
        total, available = 100, 9

    monkeypatch.setattr(search.psutil, "virtual_memory", lambda: VM)
    assert search.memory_short()
    VM.available = 11
    assert not search.memory_short()
