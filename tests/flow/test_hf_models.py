"""Models as `transformers` defines them (small configs, seeded random weights, nothing downloaded) through
`tvm_rl.optimize`: each imports, the graph pass keeps it exact, it builds on LLVM, matches PyTorch and comes back
in the model's own output structure (its ModelOutput)."""
import numpy as np
import pytest
import torch

import tvm_rl
from tvm_rl import models
from tvm_rl.errors import ModelImportError

pytest.importorskip("transformers")
from tests.support.hf_models import FAMILIES, llama, seeded  # noqa: E402

FAST = ["bert", "gpt2", "llama", "vit", "resnet"]  # ~15 s each on two busy cores; the rest ~25-40 s each


def _leaves(out) -> list[np.ndarray]:
    return [np.asarray(v) for v in out.values()]


@pytest.mark.parametrize("name", [*FAST, *[pytest.param(n, marks=pytest.mark.slow) for n in FAMILIES
                                           if n not in FAST]])
def test_hf_model_optimizes_exactly_and_keeps_its_output_structure(name, cpu, tmp_path):
    torch.manual_seed(0)
    model, draw = FAMILIES[name]()
    model = seeded(model)
    x = draw()
    with torch.no_grad():
        want = model(x)
    # optimize checks the rewritten build against PyTorch (rtol / atol below) and raises MismatchError if not.
    out = tvm_rl.optimize(model, cpu, example_inputs=(x,), name=name, trials_per_kernel=0, rewrite_seconds=3,
                          repeat=1, fast_math=False, rtol=1e-4, atol=1e-4, work_dir=tmp_path)
    got = out()
    assert type(got) is type(want) and list(got.keys()) == list(want.keys())
    for g, w in zip(_leaves(got), [v.numpy() for v in want.values()]):
        assert g.shape == w.shape and float(w.std()) > 0.05  # not degenerate: a match means something
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
    other = draw(seed=2)  # other inputs through the returned build
    with torch.no_grad():
        want = model(other)
    for g, w in zip(_leaves(out(other.numpy())), [v.numpy() for v in want.values()]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))


def test_a_decoder_with_its_cache_on_says_to_turn_it_off():
    model, draw = llama(use_cache=True)
    with pytest.raises(ModelImportError, match="use_cache=False"):
        models.from_torch(seeded(model), (draw(),), name="llama-cache")


def test_a_decoder_with_its_cache_on_wrapped_to_return_logits_imports_as_prefill(cpu):
    """The cache starts as an empty 1-D tensor that torch.cat skips and TVM's importer refused."""
    from tvm_rl import measure

    model, draw = llama(use_cache=True)
    model = seeded(model)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x).logits

    m = models.from_torch(Logits(), (draw(),), name="llama-cache-logits")
    runner = measure.Runner(measure.build(m.mod, cpu), cpu)
    measure.assert_close(runner(m.inputs), m.reference_outputs(), rtol=1e-4, atol=1e-4, what=m.name)


def test_torch_compile_takes_a_decoder_with_its_cache_as_one_graph():
    """Dynamo flattens the cache itself: one graph through TVM (fallback off), logits and cache as eager."""
    model, draw = llama(use_cache=True)
    model, x = seeded(model), draw()
    compiled = torch.compile(model, backend="tvm_rl", options={"rewrite": False, "fallback": False})
    with torch.no_grad():
        got, want = compiled(x), model(x)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-4)
    for g, w in zip(got.past_key_values.layers, want.past_key_values.layers):
        torch.testing.assert_close(g.keys, w.keys, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(g.values, w.values, rtol=1e-4, atol=1e-4)
