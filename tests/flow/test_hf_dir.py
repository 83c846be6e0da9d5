"""A Hugging Face model folder (what `save_pretrained` writes) through `tvm-rl optimize --hf` and `optimize(path)`."""
import pytest
import torch

from tvm_rl.errors import ModelImportError
from tvm_rl.models import huggingface

T = pytest.importorskip("transformers")


def test_example_inputs_follow_the_config():
    vit = T.ViTModel(T.ViTConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                 image_size=48, patch_size=16))
    assert huggingface.example_inputs(vit)["pixel_values"].shape == (1, 3, 48, 48)
    bert = T.BertModel(T.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                    vocab_size=100, max_position_embeddings=64))
    ids = huggingface.example_inputs(bert)["input_ids"]
    assert ids.shape == (1, 64) and ids.dtype == torch.int64 and int(ids.max()) < 100
    assert huggingface.example_inputs(bert, {"input_ids": [2, 8]})["input_ids"].shape == (2, 8)
    with pytest.raises(ModelImportError, match="pixel_values.*input_ids"):
        huggingface.example_inputs(bert, {"pixel_values": [1, 3, 8, 8]})


def test_a_folder_without_a_config_is_not_taken_for_one(tmp_path):
    assert not huggingface.is_pretrained_dir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert huggingface.is_pretrained_dir(tmp_path)


def test_the_cli_takes_a_folder(monkeypatch, tmp_path):
    import tvm_rl.flow
    from tvm_rl import flow_command

    seen = []
    monkeypatch.setattr(tvm_rl.flow, "optimize", lambda model, target, **kw: seen.append(model) or exit(0))
    with pytest.raises(SystemExit):
        flow_command.main(["--hf", str(tmp_path), "--trials", "0"])
    assert seen == [str(tmp_path)]


@pytest.mark.slow
def test_a_saved_decoder_is_optimized_and_its_outputs_keep_their_structure(tmp_path):
    import tvm_rl

    model = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                           bos_token_id=0, eos_token_id=0, pad_token_id=0))
    model.save_pretrained(tmp_path / "gpt2-small")
    out = tvm_rl.optimize(tmp_path / "gpt2-small", trials_per_kernel=0, rewrite=False, work_dir=tmp_path / "work",
                          repeat=2)
    assert out.report.model == "gpt2-small"
    logits = out().logits  # the model's own ModelOutput, not a flat list
    assert logits.shape == (1, 16, 64)
