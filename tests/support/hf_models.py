"""Model families as `transformers` defines them, at small configs with seeded weights (nothing downloaded), and
their example inputs: the real-model matrix the tests run (`tests/flow/test_hf_*.py`)."""
import math

import torch
import transformers as T

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
