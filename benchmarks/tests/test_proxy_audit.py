"""The proxy audit: every lowered kernel priced and timed, totals that add up, a table that reads them."""
import pytest

from benchmarks.graphs import proxy_audit
from tests.support import graph_examples as testing
from tvm_rl.graph import roofline
from tvm_rl.graph.profiles import graph_roofline_ms


@pytest.fixture(scope="module")
def audit():
    hw = roofline.default_hardware("llvm")
    return hw, proxy_audit.audit_graph(testing.conv_chain_graph(), "llvm", hw, repeat=3)


def test_every_kernel_is_priced_and_timed(audit):
    _, a = audit
    kinds = {k["kind"] for k in a["kernels"]}
    assert "conv" in kinds  # the two convolutions, with the bias and relu fused into the first
    assert all(k["proxy_ms"] > 0 and k["measured_ms"] > 0 and k["calls"] >= 1 for k in a["kernels"])


def test_totals_are_the_kernels_summed_per_kind(audit):
    _, a = audit
    assert sum(r["kernels"] for r in a["by_kind"].values()) == len(a["kernels"])
    assert sum(r["proxy_ms"] for r in a["by_kind"].values()) == pytest.approx(a["kernel_proxy_ms"])
    assert sum(r["measured_ms"] for r in a["by_kind"].values()) == pytest.approx(a["measured_kernels_ms"])
    assert a["measured_kernels_ms"] == pytest.approx(sum(k["calls"] * k["measured_ms"] for k in a["kernels"]))


def test_the_relax_level_price_is_the_search_s_own(audit):
    hw, a = audit
    assert a["relax_proxy_ms"] == pytest.approx(graph_roofline_ms(testing.conv_chain_graph(), hw))
    # The fusion replay predicts TVM's lowering of this chain, so both prices agree.
    assert a["relax_proxy_ms"] == pytest.approx(a["kernel_proxy_ms"], rel=0.25)


def test_table_has_a_row_per_kind_and_a_total(audit):
    _, a = audit
    lines = proxy_audit.audit_table({"g": a})
    assert len(lines) == 2 + len(a["by_kind"]) + 1
    assert "**all**" in lines[-1]


def test_the_benchmark_audits_each_distinct_graph_once(monkeypatch):
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    sys.modules.pop("graph_rl", None)
    import graph_rl

    mod = testing.conv_chain_graph()
    variants = {"original": (mod, 0.0, []), "arm@0": (testing.pointwise_graph(), 1.0, ["x"]),
                "arm@1": (mod, 1.0, [])}
    rows = {"original": {"latency_ms": 1.0}, "arm@0": {"latency_ms": 0.5},
            "arm@1": {"latency_ms": 1.0, "same_graph_as": "original"}}
    args = SimpleNamespace(tune_trials=0)
    audits = graph_rl.audit_variants(variants, rows, "llvm", None, args, roofline.default_hardware("llvm"))
    assert list(audits) == ["original", "arm@0"]
    assert audits["arm@0"]["latency_ms"] == 0.5 and audits["arm@0"]["measured_kernels_ms"] > 0
