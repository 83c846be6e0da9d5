"""Every zoo model compiles for CUDA here (nvcc, no GPU needed): the build holds real device kernels."""
import pytest

from tvm_rl import measure, models


def cuda_source(executable) -> str:
    """The CUDA C source of the device module imported by a VM executable."""
    stack, found = list(executable.mod.imports), []
    while stack:
        module = stack.pop()
        if module.kind == "cuda":
            found.append(module.inspect_source())
        stack.extend(module.imports)
    return "\n".join(found)


@pytest.mark.parametrize("name", ["resnet18", "bert", "mobilenet_v2"])
def test_cuda_codegen(name):
    model = models.load(name, "tiny")
    source = cuda_source(measure.build(model.mod, measure.cuda_target("sm_90")))
    assert "__global__" in source and "threadIdx.x" in source


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(models.names()) - {"resnet18", "bert", "mobilenet_v2"}))
def test_cuda_codegen_rest_of_zoo(name):
    test_cuda_codegen(name)
