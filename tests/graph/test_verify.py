"""graph.verify's build: each distinct operator call legalised once, every variant still computed exactly."""
import numpy as np
import tvm
from tvm import relax, tirx

from tvm_rl.graph.verify import legalize_once, run_variants


def softmaxes(axes, shape=(4, 4)):
    """`main` applying softmax along each of `axes` to its input, one output per axis."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(shape), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            outs = [bb.emit(relax.op.nn.softmax(x, axis=a)) for a in axes]
            y = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(y)
    return bb.get()


def kernels(mod):
    return sum(isinstance(f, tirx.PrimFunc) for f in mod.functions.values())


def test_equal_calls_share_one_kernel_and_calls_differing_in_attributes_or_types_do_not():
    with tvm.target.Target("llvm"):
        assert kernels(legalize_once(softmaxes([1, 1, 1]))) == 1
        # Same operator and argument types, another axis: a key without the attributes would reuse axis 1's
        # kernel for axis 0 (and the outputs below would differ).
        assert kernels(legalize_once(softmaxes([0, 1]))) == 2
        assert kernels(legalize_once(tvm.IRModule({"a": softmaxes([1])["main"].with_attr("global_symbol", "a"),
                                                   "b": softmaxes([1], (4, 5))["main"]
                                                   .with_attr("global_symbol", "b")}))) == 2


def test_variants_built_with_shared_kernels_compute_what_each_computes_alone():
    x = np.random.default_rng(0).standard_normal((4, 4)).astype("float32")
    mod = softmaxes([0, 1])
    outs = run_variants(mod, {"swapped": softmaxes([1, 0]), "same": softmaxes([0, 1])}, [x])
    e0, e1 = np.exp(x - x.max(0)), np.exp(x - x.max(1, keepdims=True))
    expected = [e0 / e0.sum(0), e1 / e1.sum(1, keepdims=True)]
    for got, want in zip(outs["original"], expected):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    for got, want in zip(outs["swapped"], expected[::-1]):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert all(np.array_equal(a, b) for a, b in zip(outs["same"], outs["original"]))
