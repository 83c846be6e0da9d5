"""`transformers` models exported to ONNX (torch.onnx's torch.export-based exporter), as `tvm-rl optimize --onnx`
takes them: each imports, goes through the graph pass, builds on LLVM and matches both ONNX Runtime on the file
and PyTorch on the model, on real inputs (token ids across the vocabulary, not the 0/1 ids `from_onnx` draws)."""
import numpy as np
import pytest
import torch

import tvm_rl
from tvm_rl import models

pytest.importorskip("transformers")
from tests.support.hf_models import FAMILIES, seeded  # noqa: E402

# A decoder (GQA, RoPE, RMSNorm, SwiGLU), an encoder and a CNN run by default; the rest with the slow tests.
FAST = ["llama", "bert", "convnext"]


@pytest.mark.parametrize("name", [*FAST, *[pytest.param(n, marks=pytest.mark.slow) for n in FAMILIES
                                           if n not in FAST]])
def test_hf_model_exported_to_onnx_optimizes_exactly(name, cpu, tmp_path):
    torch.manual_seed(0)
    model, draw = FAMILIES[name]()
    model, x = seeded(model), draw()
    m = models.from_onnx(models.export_onnx(model, (x,), tmp_path / f"{name}.onnx"))
    m.inputs = [x.numpy()]
    # optimize checks its rewritten build against ONNX Runtime on m.inputs and raises MismatchError if not.
    out = tvm_rl.optimize(m, cpu, trials_per_kernel=0, rewrite_seconds=3, repeat=1, fast_math=False, rtol=1e-4,
                          atol=1e-4, work_dir=tmp_path / "work")
    got = out()
    with torch.no_grad():
        want = [v.numpy() for v in model(x).values()]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and float(w.std()) > 0.05  # not degenerate: a match means something
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
