"""torch.compile(model, backend="tvm_rl") (tvm_rl/dynamo.py): graphs go through tvm_rl.optimize and match eager."""
import importlib.metadata
import warnings

import numpy as np
import pytest
import torch
import torch._dynamo

import tvm_rl
from tvm_rl import dynamo
from tvm_rl.errors import TvmRlError


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def compiled_graphs(monkeypatch):
    """Every graph dynamo hands our backend that TVM compiled (the TvmGraph objects, in order)."""
    made: list = []
    real = dynamo.compile_graph

    def counting(gm, inputs, opts):
        graph = real(gm, inputs, opts)
        made.append(graph)
        return graph

    monkeypatch.setattr(dynamo, "compile_graph", counting)
    return made


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


class Broken(torch.nn.Module):
    """Two graphs: dynamo breaks the forward at the explicit graph_break()."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x):
        y = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return torch.sigmoid(self.b(y)) * 2.0


class Erfinv(torch.nn.Module):
    """erfinv has no converter in TVM's PyTorch frontend."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.special.erfinv(torch.tanh(self.fc(x)) * 0.5)


def _model(cls):
    torch.manual_seed(0)
    model = cls().eval()
    if isinstance(model, ConvNet):  # running statistics that are not the identity, so folding them matters
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    return model


def _close(got, want, tol=1e-4):
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("rewrite", [True, False])
def test_matches_eager_with_and_without_the_graph_pass(tmp_path, compiled_graphs, rewrite):
    model = _model(ConvNet)
    fast = torch.compile(model, backend="tvm_rl",
                         options={"trials_per_kernel": 0, "rewrite": rewrite, "work_dir": str(tmp_path)})
    x1, x2 = torch.randn(2, 3, 6, 6), torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        y1 = fast(x1)
        y1_copy = y1.clone()
        y2 = fast(x2)  # same shape, new values: same build, fresh outputs
        _close(y1, model(x1))
        _close(y2, model(x2))
    _close(y1, y1_copy)  # the second call wrote nowhere near the first call's output (DLPack, no buffer reuse)
    assert len(compiled_graphs) == 1
    report = compiled_graphs[0].optimized.report
    assert report.trials_measured == 0 and ("graph pass" in report.seconds) == rewrite
    assert (tmp_path / f"optimize_{report.model}.json").exists()


def test_a_graph_break_gives_two_graphs_both_compiled(tmp_path, compiled_graphs):
    model = _model(Broken)
    fast = torch.compile(model, backend="tvm_rl", options={"work_dir": str(tmp_path), "rewrite": False})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)  # neither graph may fall back
        for seed in (1, 2):
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed))
            _close(fast(x), model(x))
    assert len(compiled_graphs) == 2
    assert all(isinstance(g, dynamo.TvmGraph) for g in compiled_graphs)


def test_the_backend_is_registered_through_its_entry_point():
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert "tvm_rl" in eps.names and eps["tvm_rl"].value == "tvm_rl.dynamo:backend"
    assert "tvm_rl" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("tvm_rl") is dynamo.backend


def test_an_unsupported_op_runs_eagerly_with_a_warning_or_raises(tmp_path, compiled_graphs):
    model = _model(Erfinv)
    x = torch.randn(3, 4)
    fast = torch.compile(model, backend="tvm_rl", options={"work_dir": str(tmp_path)})
    with torch.no_grad(), pytest.warns(dynamo.FallbackWarning, match="erfinv") as caught:
        _close(fast(x), model(x))
    assert len([w for w in caught if issubclass(w.category, dynamo.FallbackWarning)]) == 1
    assert compiled_graphs == []

    torch._dynamo.reset()
    strict = torch.compile(model, backend="tvm_rl", options={"work_dir": str(tmp_path), "fallback": False})
    with torch.no_grad(), pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as err:
        strict(x)
    # dynamo wraps whatever a backend raises; ours is a TvmRlError naming the op.
    assert isinstance(err.value.inner_exception, TvmRlError) and "erfinv" in str(err.value.inner_exception)


def test_graphs_it_cannot_take_run_eagerly_with_the_reason(tmp_path, compiled_graphs):
    model = _model(ConvNet)
    x = torch.randn(2, 3, 6, 6)
    options = {"work_dir": str(tmp_path), "rewrite": False}
    # Gradients: a TVM build is inference-only, so outside no_grad the graph stays in PyTorch (autograd works).
    fast = torch.compile(model, backend="tvm_rl", options=options)
    with pytest.warns(dynamo.FallbackWarning, match="requires grad"):
        y = fast(x)
    y.sum().backward()
    assert model.fc.weight.grad is not None
    # Symbolic shapes (dynamo's automatic dynamic after a second shape): eager, and the warning says what to do.
    torch._dynamo.reset()
    fast = torch.compile(model, backend="tvm_rl", options=options)
    with torch.no_grad():
        fast(x)
        with pytest.warns(dynamo.FallbackWarning, match="dynamic=False"):
            x3 = torch.randn(3, 3, 6, 6)
            _close(fast(x3), model(x3))
    assert len(compiled_graphs) == 1  # the static first graph only


def test_dynamic_false_builds_each_shape_and_takes_strided_inputs(tmp_path, compiled_graphs):
    model = _model(ConvNet)
    fast = torch.compile(model, backend="tvm_rl", dynamic=False, options={"work_dir": str(tmp_path), "rewrite": False})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        for x in (torch.randn(2, 3, 6, 6), torch.randn(3, 3, 6, 6), torch.randn(3, 3, 6, 12)[..., ::2]):
            _close(fast(x), model(x))  # the last is not contiguous: copied before it goes to TVM
    assert len(compiled_graphs) == 3  # batch 2, batch 3, batch 3 with other strides (dynamo guards on strides)


def test_options_are_checked():
    with pytest.raises(TvmRlError, match="unknown option.*'trials'"):
        dynamo.Options.parse({"trials": 4})
    with pytest.raises(TvmRlError, match="trials_per_kernel"):
        dynamo.Options.parse({"trials_per_kernel": -1})
    assert dynamo.Options.parse(None, "max-autotune").trials_per_kernel == 16
    assert dynamo.Options.parse({"work_dir": None}).resolved_work_dir().name == "torch_compile"
    assert dynamo.Options.parse({"channels_last": False}).channels_last is False


def test_frozen_weights_are_rebuilt_when_they_change_and_unfrozen_ones_are_inputs(tmp_path, compiled_graphs):
    model = _model(Broken)
    x = torch.randn(4, 16)
    fast = torch.compile(model, backend="tvm_rl", options={"work_dir": str(tmp_path), "rewrite": False})
    with torch.no_grad():
        _close(fast(x), model(x))
        model.a.weight.mul_(-1.0)  # in place, as an optimizer step or load_state_dict does
        with pytest.warns(dynamo.FallbackWarning, match="rebuilding"):
            _close(fast(x), model(x))
        _close(fast(x), model(x))
    assert len(compiled_graphs) == 3  # two graphs, then the first one again with the new weight

    torch._dynamo.reset()
    compiled_graphs.clear()
    fast = torch.compile(model, backend="tvm_rl",
                         options={"work_dir": str(tmp_path), "rewrite": False, "freeze": False})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        _close(fast(x), model(x))
        model.b.bias.add_(1.0)
        _close(fast(x), model(x))  # the weights are inputs of the build: no rebuild, still right
    assert len(compiled_graphs) == 2


def test_integer_inputs_and_outputs_keep_their_dtypes(tmp_path):
    class Pick(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 5)

        def forward(self, x, rows):
            y = self.fc(x)
            return torch.argmax(y, dim=1), y[rows]

    model = _model(Pick)
    x, rows = torch.randn(3, 4), torch.tensor([2, 0])
    with torch.no_grad():
        got = torch.compile(model, backend="tvm_rl", options={"work_dir": str(tmp_path), "rewrite": False})(x, rows)
        want = model(x, rows)
    assert isinstance(got, tuple) and [g.dtype for g in got] == [torch.int64, torch.float32]
    _close(got[0], want[0])
    _close(got[1], want[1])


def test_optimize_with_no_trials_measures_nothing(tmp_path):
    """trials_per_kernel=0 (the backend's default) is optimize() without a tuning stage's measurements."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(2, 8)
    out = tvm_rl.optimize(model, "llvm", example_inputs=(x,), work_dir=tmp_path, rewrite=False,
                          trials_per_kernel=0, repeat=2)
    assert out.report.trials_measured == 0 and out.report.kernels_tuned >= 1
    with torch.no_grad():
        np.testing.assert_allclose(out(x.numpy())[0], model(x).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_small_tuning_budget_matches_eager(tmp_path, compiled_graphs):
    model = _model(ConvNet)
    fast = torch.compile(model, backend="tvm_rl",
                         options={"trials_per_kernel": 2, "target": "llvm", "work_dir": str(tmp_path), "seed": 1,
                                  "strategy": "random"})  # the backend's tuning path, not the search, is tested
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3, 6, 6)
            _close(fast(x), model(x))
    report = compiled_graphs[0].optimized.report
    assert report.trials_measured >= 1 and report.kernels_tuned >= 1
