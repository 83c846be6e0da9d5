"""The graph benchmarks' measurement: every distinct graph built and checked once, identical graphs one build."""
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from tests.support import graph_examples as T
from tvm_rl import measure
from tvm_rl.graph import cost, roofline
from tvm_rl.graph.rules import get_rule

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from graph_search import measure_variants  # noqa: E402


def test_a_variant_with_the_original_graph_is_the_original_build(monkeypatch):
    mod = T.merge_matmul_graph()
    rule = get_rule("merge_parallel_matmul")
    rewritten = rule.apply(mod, rule.matches(mod)[0])
    builds = []
    build = measure.build
    monkeypatch.setattr(measure, "build", lambda m, *a, **k: (builds.append(m), build(m, *a, **k))[1])
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
    variants = {"original": (mod, 0.0, []), "rewritten": (rewritten, 1.0, ["merge"]),
                "guarded": (mod, 2.0, [], {"kept": False})}  # a guard that returned the input
    rows = measure_variants(SimpleNamespace(inputs=[x]), variants, measure.parse_target("llvm"), None, 3,
                            cost.roofline_cost(roofline.default_hardware("llvm")))
    assert len(builds) == 2 and builds[1] is rewritten
    assert rows["guarded"]["same_graph_as"] == "original" and "same_graph_as" not in rows["rewritten"]
    assert rows["guarded"]["latency_ms"] == rows["original"]["latency_ms"] and rows["guarded"]["speedup"] == 1.0
    assert rows["guarded"]["guard"] == {"kept": False} and rows["guarded"]["optimisation_s"] == 2.0
    assert all(r["matches_original"] for r in rows.values())


def test_with_fast_math_every_graph_is_built_lowered_and_priced_as_it_is(monkeypatch):
    """--fast-math: the build (and tuning) get the lowered graph; the proxy and the same-graph check the graph."""
    from graph_search import lowering
    from tvm.script import relax as R

    from tvm_rl import fast_math

    mod = T.module(lambda emit, x: emit(R.nn.gelu(x)), [(4, 8)])
    builds, priced = [], []
    build = measure.build
    monkeypatch.setattr(measure, "build", lambda m, *a, **k: (builds.append(m), build(m, *a, **k))[1])
    lower = lowering(SimpleNamespace(fast_math=True))
    assert lower is fast_math.fast_math and lowering(SimpleNamespace(fast_math=False)) is None
    x = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    rows = measure_variants(SimpleNamespace(inputs=[x]), {"original": (mod, 0.0, []), "again": (mod, 0.0, [])},
                            measure.parse_target("llvm"), None, 3, lambda m: (priced.append(m), 1.0)[1],
                            lower=lower)
    assert len(builds) == 1 and "fast_erf" in builds[0].script() and all(m is mod for m in priced)
    assert rows["again"]["same_graph_as"] == "original"
