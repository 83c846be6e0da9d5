"""Models as `transformers` defines them (small configs, seeded random weights, nothing downloaded) through
`tvm_rl.optimize`: each imports, the graph pass keeps it exact, it builds on LLVM, matches PyTorch and comes back
in the model's own output structure (its ModelOutput)."""
import math

import numpy as np
import pytest
import torch

import tvm_rl
from tvm_rl import models
from tvm_rl.errors import ModelImportError

T = pytest.importorskip("transformers")

TOKENS = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)  # inside the small vocabularies below


def seeded(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """`model` with weights drawn from `seed` at scales that keep activations O(1) (the library's own
    initialisation left some outputs near 0, where a match proves nothing)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))
            elif name.endswith("weight"):  # norm scales
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
    return model.eval()


def ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(seed))


def image(seed: int = 1) -> torch.Tensor:
    return torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def gpt2(use_cache: bool = False):
    return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64,
                                          use_cache=use_cache, **TOKENS)), ids


def llama(use_cache: bool = False):  # GQA (2 key/value heads for 4), RoPE, RMSNorm, SwiGLU
    return T.LlamaForCausalLM(T.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                            num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                            max_position_embeddings=64, use_cache=use_cache, **TOKENS)), ids


FAMILIES = {
    "bert": lambda: (T.BertModel(T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                              intermediate_size=128, vocab_size=256, max_position_embeddings=64)),
                     ids),
    "gpt2": gpt2,
    "llama": llama,
    "vit": lambda: (T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, num_hidden_layers=2, hidden_size=64,
                                           num_attention_heads=4, intermediate_size=128)), image),
    "resnet": lambda: (T.ResNetModel(T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                                    layer_type="basic")), image),
    "t5_encoder": lambda: (T.T5EncoderModel(T.T5Config(num_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128,
                                                       vocab_size=256)), ids),
    "convnext": lambda: (T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                                                          image_size=32)), image),
    "swin": lambda: (T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                              num_heads=[2, 2], window_size=4)), image),
    "mobilenet_v2": lambda: (T.MobileNetV2Model(T.MobileNetV2Config(image_size=32, depth_multiplier=0.35)), image),
    "efficientnet": lambda: (T.EfficientNetModel(T.EfficientNetConfig(image_size=32, width_coefficient=0.25,
                                                                      depth_coefficient=0.25, hidden_dim=320)),
                             image),
    "whisper_encoder": lambda: (T.WhisperModel(T.WhisperConfig(
        d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32, vocab_size=256,
        decoder_start_token_id=0, **TOKENS)).get_encoder(),
        lambda seed=1: torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(seed))),
}
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
