"""The epilogue-space benchmark: which kernels it tunes, and that its stock arm never leaks into later tunings."""
import numpy as np
import pytest
from tvm import relax

from benchmarks import epilogue_space
from tvm_rl import measure
from tvm_rl.tune import design_space


def _two_convs():
    """A 3x3 conv + bias (more FLOPs) feeding a 1x1 conv + bias, and a bare 1x1 conv (no epilogue)."""
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    const = lambda *s: relax.const(rng.standard_normal(s).astype("float32"))  # noqa: E731
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.add(relax.op.nn.conv2d(x, const(8, 8, 3, 3), padding=1), const(1, 8, 1, 1)))
            b = bb.emit(relax.op.add(relax.op.nn.conv2d(a, const(4, 8, 1, 1)), const(1, 4, 1, 1)))
            c = bb.emit(relax.op.nn.conv2d(b, const(2, 4, 1, 1)))
            out = bb.emit_output(c)
        bb.emit_func_output(out)
    return bb.get()


def test_kernels_with_an_epilogue_most_flops_first():
    cpu = measure.parse_target("llvm")
    kernels = epilogue_space.epilogue_kernels(_two_convs(), cpu, 5)
    assert len(kernels) == 2  # the bare conv has no epilogue to fuse
    assert "conv2d_add" in kernels[0][0] and kernels[0][2] == 1
    assert [k[0] for k in epilogue_space.epilogue_kernels(_two_convs(), cpu, 1)] == [kernels[0][0]]
    named = epilogue_space.epilogue_kernels(_two_convs(), cpu, 5, names=[kernels[1][0]])
    assert [k[0] for k in named] == [kernels[1][0]]
    with pytest.raises(SystemExit, match="no kernel named nope"):
        epilogue_space.epilogue_kernels(_two_convs(), cpu, 5, names=["nope"])


def test_the_stock_space_is_switched_back_even_when_tuning_fails(monkeypatch, tmp_path):
    seen = []

    def fail(*args, **kwargs):
        seen.append(design_space.FUSE_EPILOGUE)
        raise RuntimeError("no tuning here")

    monkeypatch.setattr(epilogue_space, "tune_workloads", fail)
    with pytest.raises(RuntimeError):
        epilogue_space.tuned_best("k", None, measure.parse_target("llvm"), tmp_path, 8, "random", 0, "stock")
    assert seen == [False] and design_space.FUSE_EPILOGUE is True
