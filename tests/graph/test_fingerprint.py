import numpy as np
import tvm_ffi

from tests.support import graph_examples as T
from tvm_rl.graph.fingerprint import module_key, same_graph
from tvm_rl.graph.rules import all_rules


def test_equal_graphs_have_equal_keys_and_different_weights_differ():
    a, b = T.bn_graph(seed=0), T.bn_graph(seed=0)  # built twice: distinct constant objects, same contents
    assert a is not b and tvm_ffi.structural_equal(a, b)
    assert module_key(a) == module_key(b) and same_graph(a, b)
    assert module_key(T.bn_graph(seed=1)) != module_key(a)


def test_key_agrees_with_structural_equality_on_every_rewrite():
    mods = [rule.apply(g(), m) for g in T.EXAMPLES.values() for rule in all_rules() for m in rule.matches(g())]
    assert len(mods) > 30
    keys = [module_key(m) for m in mods]
    hashes = [tvm_ffi.structural_hash(m) for m in mods]
    # Same structural hash <=> same key (on these graphs no hash collides).
    for i in range(len(mods)):
        for j in range(i + 1, len(mods)):
            assert (keys[i] == keys[j]) == (hashes[i] == hashes[j]), (i, j)


def test_caches_holding_new_weights_are_flushed_once_the_rewrites_made_the_budget(monkeypatch):
    from tvm_rl.graph import fingerprint, keepalive, view
    from tvm_rl.graph.rules.ir import const

    mod = T.bn_graph(seed=0)
    module_key(mod), view.graph_of(mod)
    assert mod.__chandle__() in fingerprint._MODULE_KEYS and mod.__chandle__() in view._GRAPHS
    monkeypatch.setattr(keepalive, "BUDGET", 3000)
    keepalive.flush()
    module_key(mod), view.graph_of(mod)
    const(np.zeros(500, "float32"), "float32")  # 2000 bytes: under the budget, the caches keep their entries
    assert mod.__chandle__() in fingerprint._MODULE_KEYS
    const(np.zeros(500, "float32"), "float32")  # 4000 bytes since the flush: every registered cache is cleared
    assert not fingerprint._MODULE_KEYS and not view._GRAPHS and not fingerprint._TEMPLATES
    assert module_key(mod) == module_key(T.bn_graph(seed=0))  # only a memo was lost


def test_an_encoding_cache_lets_go_of_its_graphs_when_the_shared_caches_are_flushed(monkeypatch):
    """The training environment's encoding cache is owned by the env, not registered (it dies with it); its
    graphs, and the weights their rewrites made, must still go when the registered caches are flushed."""
    from tvm_rl.graph import keepalive, observation, roofline
    from tvm_rl.graph.rules.ir import const

    calls = []
    real = observation.encode
    monkeypatch.setattr(observation, "encode", lambda mod, hw: calls.append(mod) or real(mod, hw))
    monkeypatch.setattr(keepalive, "BUDGET", 3000)
    cache, mod, hw = observation.EncodingCache(), T.bn_graph(seed=0), roofline.default_hardware("llvm")
    cache.encode(mod, hw)
    cache.encode(mod, hw)
    assert len(calls) == 1  # remembered
    const(np.zeros(1000, "float32"), "float32")  # 4000 bytes of new weights: past the budget, a flush
    cache.encode(mod, hw)
    assert len(calls) == 2 and len(cache._entries) == 1  # the old entries went; only this graph is held
