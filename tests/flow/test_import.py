"""User models and ONNX files go through the same path; bad input names the file or the op."""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tvm_rl import measure, models
from tvm_rl.errors import ModelImportError


@pytest.mark.parametrize("name", ["resnet18", "bert"])
def test_onnx_export_round_trips(name, cpu, tmp_path):
    model = models.load(name, "tiny")
    path = models.export_onnx(model.torch_module, [torch.from_numpy(x) for x in model.inputs],
                              tmp_path / f"{name}.onnx")
    imported = models.from_onnx(path)
    assert [x.shape for x in imported.inputs] == [x.shape for x in model.inputs]
    runner = measure.Runner(measure.build(imported.mod, cpu), cpu)
    # TVM's build of the ONNX graph agrees with ONNX Runtime and with the original PyTorch model.
    measure.assert_close(runner(model.inputs), imported.reference_outputs(model.inputs), rtol=1e-4, atol=1e-4)
    measure.assert_close(runner(model.inputs), model.reference_outputs(), rtol=1e-4, atol=1e-4)


def test_user_module():
    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)))

    model = models.from_torch(Mlp(), (torch.randn(2, 6),), name="mlp")
    out = measure.Runner(measure.build(model.mod, "llvm"), "llvm")(model.inputs)
    measure.assert_close(out, model.reference_outputs())


def test_truncated_onnx_file_names_the_file(tmp_path):
    model = models.load("resnet18", "tiny")
    good = models.export_onnx(model.torch_module, [torch.from_numpy(x) for x in model.inputs], tmp_path / "m.onnx")
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(ModelImportError, match="truncated.onnx"):
        models.from_onnx(bad)
    with pytest.raises(ModelImportError, match="not found: .*missing.onnx"):
        models.from_onnx(tmp_path / "missing.onnx")


def _onnx_with(node, path, in_shape=(2, 3)):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, in_shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_unsupported_onnx_operator_is_named(tmp_path):
    path = _onnx_with(helper.make_node("Celu", ["x"], ["y"]), tmp_path / "celu.onnx")
    # Celu is a standard ONNX op; if TVM gains it, this test needs another unsupported op.
    with pytest.raises(ModelImportError, match="celu.onnx.*Celu"):
        models.from_onnx(path)


def test_dynamic_onnx_input_asks_for_a_shape(tmp_path):
    path = _onnx_with(helper.make_node("Relu", ["x"], ["y"]), tmp_path / "dyn.onnx", in_shape=("batch", 3))
    with pytest.raises(ModelImportError, match="input 'x' has dynamic or symbolic shape"):
        models.from_onnx(path)
    model = models.from_onnx(path, shapes={"x": [4, 3]})
    out = measure.Runner(measure.build(model.mod, "llvm"), "llvm")(model.inputs)
    np.testing.assert_allclose(out[0], np.maximum(model.inputs[0], 0))


def test_unsupported_torch_operator_is_named():
    class Odd(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x)

    with pytest.raises(ModelImportError, match="bessel_j0"):
        models.from_torch(Odd(), (torch.randn(3),), name="odd")


def test_model_with_several_outputs():
    class Two(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x), x * 2

    model = models.from_torch(Two(), (torch.randn(3, 4),), name="two")
    out = measure.Runner(measure.build(model.mod, "llvm"), "llvm")(model.inputs)
    assert len(out) == 2
    measure.assert_close(out, model.reference_outputs())
