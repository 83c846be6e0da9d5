import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_rl
from tests.support import graph_examples as T
from tvm_rl.errors import TvmRlError
from tvm_rl.graph import arms


@pytest.mark.slow
def test_optimize_a_relax_module_end_to_end(tmp_path, cpu):
    mod = T.merge_matmul_graph()
    # random sampling keeps it short; the CLI test below runs the default strategy end to end
    out = tvm_rl.optimize(mod, cpu, work_dir=tmp_path, trials_per_kernel=2, rewrite_steps=3, repeat=3,
                          strategy="random")
    r = out.report
    assert r.default_ms > 0 and r.optimized_ms > 0 and r.kernels_tuned >= 1 and r.trials_measured >= 1
    assert {"import", "default build", "graph pass", "tuning"} <= set(r.seconds)
    assert r.graph_policy == arms.DEFAULT_ARM  # policy=None runs the pass's default
    assert (tmp_path / f"optimize_{r.model}.json").exists()
    # Never slower than the default build: a tuned build that lost is replaced by the default one.
    assert r.optimized_ms <= r.default_ms and r.kept_default == (r.tuned_ms > r.default_ms)
    assert (out.mod is mod) if r.kept_default else r.optimized_ms == r.tuned_ms
    # The exported library runs and gives the same outputs.
    lib = tvm.runtime.load_module(str(out.export(tmp_path / "model.so")))
    vm = relax.VirtualMachine(lib, tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(x) for x in out.inputs])
    got = got[0] if isinstance(got, (list, tuple, tvm.ir.Array)) else got
    np.testing.assert_allclose(got.numpy(), out()[0], rtol=1e-5, atol=1e-5)
    assert "outputs match" in r.summary()


@pytest.mark.slow
def test_graph_rounds_rewrite_again_after_tuning_and_keep_the_fastest(tmp_path, cpu, monkeypatch):
    """Each round after the first is priced by the kernels tuned before it; a round that repeats an earlier
    round's graph ends the loop; the kept build is the round that measured fastest."""
    import types

    import tvm_ffi

    import tvm_rl.flow
    from tvm_rl.database import TuningDatabase
    from tvm_rl.graph.rules.base import get_rule

    mod = T.merge_matmul_graph()
    rule = get_rule("merge_parallel_matmul")
    merged = rule.apply(mod, rule.find(tvm_rl.graph.view.graph_of(mod))[0])
    graphs, seen_records = [merged, mod, merged], []

    def fake_rewrite(source, target, tuning_dir, *args):
        folder = TuningDatabase.of(tuning_dir)
        seen_records.append(folder is not None and folder.records_path.exists())
        out = graphs[len(seen_records) - 1]
        applied = [] if out is mod else ["merge_parallel_matmul"]
        return out, types.SimpleNamespace(applied=applied, reason="r", policy="p")

    monkeypatch.setattr(tvm_rl.flow, "_rewrite", fake_rewrite)
    # random sampling: the rounds, not the search, are under test (evolutionary costs a minute a round)
    out = tvm_rl.optimize(mod, cpu, work_dir=tmp_path, trials_per_kernel=2, repeat=3, graph_rounds=4,
                          strategy="random")
    r = out.report
    assert seen_records == [False, True, True]  # rounds 2 and 3 saw round 1's tuned kernels
    assert [g.get("round") for g in r.graph_rounds] == [1, 2, 3]
    assert r.graph_rounds[2] == {"round": 3, "same_graph_as_round": 1}  # repeated: not tuned or timed again
    timed = r.graph_rounds[:2]
    best = min(timed, key=lambda g: g["tuned_ms"])
    assert r.tuned_ms == best["tuned_ms"] and r.graph_rewrites == (["merge_parallel_matmul"] * best["rewrites"])
    # The kept round's module is its graph as the graph stage finishes it (channels-last, fast math on CPU), whether
    # or not it beat the default build (which out.mod then is).
    kept = merged if best["round"] == 1 else mod
    kept = tvm_rl.flow.to_channels_last(kept) if r.channels_last else kept
    kept = tvm_rl.flow.lower_fast_math(kept) if r.fast_math else kept
    assert tvm_ffi.structural_equal(out.rewritten, kept)
    assert tvm_ffi.structural_equal(out.mod, mod if r.kept_default else kept)
    assert {"graph pass", "graph pass 2", "graph pass 3", "tuning", "tuning 2"} <= set(r.seconds)


def test_optimize_rejects_what_it_cannot_take():
    with pytest.raises(TvmRlError, match="takes a torch.nn.Module"):
        tvm_rl.optimize(42)
    import torch

    with pytest.raises(TvmRlError, match="example_inputs"):
        tvm_rl.optimize(torch.nn.Linear(2, 2))


def test_cli_optimize_passes_the_graph_policy_on(monkeypatch, capsys):
    """`--policy` reaches `optimize` (None, the pass's default, when not given), and the help names the default."""
    import tvm_rl.flow
    from tvm_rl.cli import main

    seen = []

    class Out:
        report = tvm_rl.flow.OptimizeReport("m", "llvm", graph_policy="x")

    monkeypatch.setattr(tvm_rl.flow, "optimize", lambda *a, **k: (seen.append(k["policy"]), Out())[1])
    assert main(["optimize", "--model", "resnet18", "--policy", "trained"]) == 0
    assert main(["optimize", "--model", "resnet18"]) == 0
    assert seen == ["trained", None]
    assert "graph rewrites (x)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    assert f"default {arms.DEFAULT_ARM}" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("flag, value, keyword, default", [
    ("--cost-model", "xgb-pretrained", "cost_model", None),  # None: MetaSchedule's XGBModel
    ("--measure", "cold", "measurement", "warm"),
])
def test_cli_optimize_passes_an_option_on(monkeypatch, flag, value, keyword, default):
    """`--cost-model` and `--measure` reach `optimize` (as `cost_model` and `measurement`), their defaults when not
    given."""
    import tvm_rl.flow
    from tvm_rl.cli import main

    seen = []

    class Out:
        report = tvm_rl.flow.OptimizeReport("m", "llvm")

    monkeypatch.setattr(tvm_rl.flow, "optimize", lambda *a, **k: (seen.append(k[keyword]), Out())[1])
    assert main(["optimize", "--model", "resnet18", flag, value]) == 0
    assert main(["optimize", "--model", "resnet18"]) == 0
    assert seen == [value, default]


@pytest.mark.parametrize("option, shown", [("fast_math", "fast math"), ("channels_last", "channels-last")])
def test_cli_optimize_passes_on_switches(monkeypatch, option, shown):
    """`--fast-math` / `--no-fast-math` (and `--channels-last` / ...) reach `optimize`; None (the target's default)
    when neither is given; the summary says when it was on."""
    import tvm_rl.flow
    from tvm_rl.cli import main

    seen = []
    flag = "--" + option.replace("_", "-")

    class Out:
        report = tvm_rl.flow.OptimizeReport("m", "llvm", **{option: True})

    monkeypatch.setattr(tvm_rl.flow, "optimize", lambda *a, **k: (seen.append(k[option]), Out())[1])
    for flags in ([flag], [flag.replace("--", "--no-")], []):
        assert main(["optimize", "--model", "resnet18", *flags]) == 0
    assert seen == [True, False, None]
    assert f", {shown}," in Out.report.summary()


def test_graph_stage_runs_convolutions_channels_last_on_cpu_by_default(cpu):
    """On a CPU target the graph stage's module has its convs in NHWC, still computing what the source does;
    channels_last=False keeps them NCHW; a GPU target's default is off."""
    from tests.support.rewrite_steps import conv_layouts
    from tvm_rl.flow import graph_stage
    from tvm_rl.graph.channels_last import default_for
    from tvm_rl.graph.verify import compare_variants

    mod = T.conv_chain_graph(cin=3, mid=8, cout=4, hw=6)
    layouts = {}
    for flag in (None, False):
        out, _ = graph_stage(mod, cpu, rewrite_steps=2, rewrite_seconds=2.0, channels_last=flag)
        layouts[flag] = set(conv_layouts(out))
        (cmp,) = compare_variants(mod, {"stage": out}).values()
        assert cmp.ok, cmp
    assert layouts == {None: {"NHWC"}, False: {"NCHW"}}
    assert default_for(cpu) and not default_for("cuda")


@pytest.mark.slow
def test_optimize_builds_gelu_with_fast_math_on_cpu_and_exactly_when_asked(tmp_path, cpu):
    """On a CPU the default build of a GELU MLP uses the fast erf, still matching the source within rtol 1e-3;
    fast_math=False keeps the exact erf."""
    from tvm.script import relax as R

    w = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32) / 8

    def body(emit, x):
        return emit(R.nn.gelu(emit(R.matmul(x, relax.const(w)))))

    mod = T.module(body, [(16, 32)])
    for fast in (None, False):
        out = tvm_rl.optimize(mod, cpu, work_dir=tmp_path / str(fast), trials_per_kernel=1, rewrite=False,
                              repeat=3, strategy="random", fast_math=fast)
        assert out.report.fast_math is (fast is None)
        assert ("fast_erf" in out.rewritten.script()) is (fast is None)


@pytest.mark.slow
def test_cli_optimizes_and_exports_an_onnx_model(tmp_path, capsys):
    """A newcomer's path: an ONNX file in, an optimized, checked, exported library out, through the CLI."""
    import torch

    from tvm_rl.cli import main
    from tvm_rl.models import export_onnx

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    onnx_path = export_onnx(net, (torch.randn(4, 16),), tmp_path / "mlp.onnx")
    rc = main(["optimize", "--onnx", str(onnx_path), "--trials", "2", "--rewrite-steps", "3",
               "--work-dir", str(tmp_path), "--export", str(tmp_path / "mlp.so")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "outputs match the source model" in out and (tmp_path / "mlp.so").exists()
    lib = tvm.runtime.load_module(str(tmp_path / "mlp.so"))
    vm = relax.VirtualMachine(lib, tvm.cpu())
    x = np.random.default_rng(1).standard_normal((4, 16)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(x))
    got = got[0] if isinstance(got, (list, tuple, tvm.ir.Array)) else got
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), net(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-4)
