"""What real models need from the importer, without `transformers`: outputs of any pytree shape come back in
their structure, in torch's leaf order; bool ops TVM cannot build on LLVM are rewritten exactly."""
import numpy as np
import pytest
import torch
from tvm import relax

import tvm_rl
from tvm_rl import measure, models
from tvm_rl.errors import BuildError, ModelImportError
from tvm_rl.models.bool_ops import fix_bool_ops


class Nested(torch.nn.Module):
    """Outputs whose pytree order differs from the order they are computed in, each a different function of x."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        a = self.lin(x)
        b = torch.tanh(x)
        c = x * 3.0
        return {"z_last": c, "a_first": (a, {"b": b}), "sum": (a + b).sum(-1)}


def test_dict_and_nested_tuple_outputs_come_back_in_their_structure_and_order(cpu, tmp_path):
    torch.manual_seed(0)
    module, x = Nested().eval(), torch.randn(2, 8)
    m = models.from_torch(module, (x,), name="nested")
    got = m.structure(measure.Runner(measure.build(m.mod, cpu), cpu)(m.inputs))
    with torch.no_grad():
        want = module(x)
    assert list(got) == ["z_last", "a_first", "sum"] and isinstance(got["a_first"], tuple)
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)  # leaf k of Relax is leaf k of torch
    out = tvm_rl.optimize(module, cpu, example_inputs=(x,), trials_per_kernel=0, rewrite_seconds=2, repeat=1,
                          work_dir=tmp_path)
    assert list(out()) == ["z_last", "a_first", "sum"]
    np.testing.assert_allclose(out()["a_first"][1]["b"], want["a_first"][1]["b"].numpy(), rtol=1e-5, atol=1e-5)


def test_one_tensor_still_comes_back_as_a_list(cpu, tmp_path):
    out = tvm_rl.optimize(torch.nn.Linear(4, 4).eval(), cpu, example_inputs=(torch.randn(1, 4),),
                          trials_per_kernel=0, rewrite=False, repeat=1, work_dir=tmp_path)
    assert isinstance(out(), list) and len(out()) == 1


def test_a_non_tensor_output_is_named():
    class WithInt(torch.nn.Module):
        def forward(self, x):
            return {"y": x + 1, "n": 3}

    with pytest.raises(ModelImportError, match=r"'with-int'.*\['n'\]"):
        models.from_torch(WithInt(), (torch.randn(2),), name="with-int")


BOOL_CASES = {
    "add": (relax.op.add, lambda a, b: a | b),
    "multiply": (relax.op.multiply, lambda a, b: a & b),
    "maximum": (relax.op.maximum, lambda a, b: a | b),
    "minimum": (relax.op.minimum, lambda a, b: a & b),
    "equal": (relax.op.equal, lambda a, b: a == b),
    "not_equal": (relax.op.not_equal, lambda a, b: a != b),
    "less": (relax.op.less, lambda a, b: a < b),
    "max": (lambda a, b: relax.op.max(a, axis=[0]), lambda a, b: a.any()),
    "min": (lambda a, b: relax.op.min(a, axis=[0]), lambda a, b: a.all()),
    "argmax": (lambda a, b: relax.op.argmax(a, axis=0), lambda a, b: a.argmax()),
    "cumsum": (lambda a, b: relax.op.cumsum(a, axis=0), lambda a, b: np.cumsum(a)),  # int64, as torch's
    "cumprod": (lambda a, b: relax.op.cumprod(a, axis=0), lambda a, b: np.cumprod(a)),
}


@pytest.mark.parametrize("name", BOOL_CASES)
def test_bool_ops_tvm_cannot_build_are_rewritten_exactly(name, cpu):
    op, ref = BOOL_CASES[name]
    bb = relax.BlockBuilder()
    a, b = (relax.Var(v, relax.TensorType((6,), "bool")) for v in "ab")
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit_output(op(a, b))
        bb.emit_func_output(out)
    mod = bb.get()
    with pytest.raises(BuildError):  # TVM 0.27's LLVM build (or legalization) of the op on bool
        measure.build(mod, cpu)
    fixed, rewritten = fix_bool_ops(mod)
    assert rewritten == [f"relax.{name}"]
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 2, 6).astype(bool), rng.integers(0, 2, 6).astype(bool)
    np.testing.assert_array_equal(measure.Runner(measure.build(fixed, cpu), cpu)([x, y])[0], ref(x, y))
