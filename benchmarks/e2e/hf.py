"""Models as `transformers` defines them, for the end-to-end benchmark (`--models hf-bert-base hf-llama-block`):
the rows users ask for first. Weights are the library's own random initialisation under a fixed seed (nothing is
downloaded); the inputs are token ids drawn across the vocabulary.

- `hf-bert-base`: `BertModel` at BERT-base's default config (12 layers, hidden 768, 12 heads), 128 tokens.
- `hf-llama-block`: `LlamaModel` with one decoder layer at TinyLlama-1.1B's widths (hidden 2048, 32 query heads and
  4 key/value heads, SwiGLU 5632, RoPE, RMSNorm), 128 tokens, no cache: the prefill of one block.

`--size tiny` gives each a two-layer (one-layer) config of width 64, for checks.
"""
from __future__ import annotations

import torch

from tvm_rl import models

TOKENS = 128


def _bert(size: str):
    import transformers as T

    if size == "tiny":
        return T.BertModel(T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                        intermediate_size=128, vocab_size=256, max_position_embeddings=TOKENS))
    return T.BertModel(T.BertConfig())


def _llama_block(size: str):
    import transformers as T

    widths = (dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                   vocab_size=256) if size == "tiny" else
              dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
                   vocab_size=32000))
    return T.LlamaModel(T.LlamaConfig(num_hidden_layers=1, max_position_embeddings=2048, use_cache=False,
                                      bos_token_id=0, eos_token_id=0, pad_token_id=0, **widths))


HF_MODELS = {"hf-bert-base": _bert, "hf-llama-block": _llama_block}


def load(name: str, size: str = "full", seed: int = 0) -> models.Model:
    """`name` (a key of HF_MODELS) built with seeded weights and imported, with its example token ids."""
    torch.manual_seed(seed)
    module = HF_MODELS[name](size).eval()
    vocab = module.config.vocab_size
    ids = torch.randint(0, vocab, (1, TOKENS if size == "full" else 16), generator=torch.Generator().manual_seed(seed))
    return models.from_torch(module, (ids,), name=name)


def load_model(name: str, size: str) -> models.Model:
    """A zoo model by name, or one of HF_MODELS."""
    return load(name, size) if name in HF_MODELS else models.load(name, size)
