"""Every zoo model imports, builds on LLVM and matches PyTorch; sizes and seeds behave."""
import numpy as np
import pytest
import torch

from tvm_rl import measure, models

ALL = models.names()


def test_zoo_has_the_anchor_models():
    assert set(ALL) == {"bert", "vit", "dalle", "transducer", "resnext50", "inception_v3", "squeezenet1_1",
                        "resnet50", "mobilenet_v2", "vgg16", "resnet18"}
    assert set(models.names("cnn")) | set(models.names("transformer")) == set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_tiny_model_builds_and_matches_pytorch(name, cpu):
    model = models.load(name, "tiny")
    runner = measure.Runner(measure.build(model.mod, cpu), cpu)
    measure.assert_close(runner(model.inputs), model.reference_outputs(), rtol=1e-4, atol=1e-4, what=name)
    # Fresh random inputs, not only the export's example: the build must compute the same function.
    rng = np.random.default_rng(1)
    other = [rng.standard_normal(x.shape).astype(x.dtype) if x.dtype.kind == "f" else x for x in model.inputs]
    measure.assert_close(runner(other), model.reference_outputs(other), rtol=1e-4, atol=1e-4, what=name)


def test_weights_follow_the_seed():
    a, b, c = (models.load("resnet18", "tiny", seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a.reference_outputs(), b.reference_outputs())
    assert not np.allclose(a.reference_outputs()[0], c.reference_outputs()[0])


def test_full_configs_have_the_anchor_shapes():
    torch.manual_seed(0)
    _, (x,) = models.spec("inception_v3").build("full")
    assert tuple(x.shape) == (1, 3, 299, 299)
    bert, (h,) = models.spec("bert").build("full")
    assert tuple(h.shape) == (1, 64, 1024) and len(bert.stack.layers) == 8
    _, (img,) = models.spec("vit").build("full")
    assert tuple(img.shape) == (1, 3, 128, 128)  # 8x8 = 64 patches of 16x16


def test_unknown_model_and_size_are_named():
    with pytest.raises(ValueError, match="unknown zoo model 'resnet5'.*resnet50"):
        models.load("resnet5")
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        models.load("bert", "huge")
