"""Hugging Face config.json conversion: real published configs match the models/ files."""

import json
from pathlib import Path

import pytest

from scaleacross_milp.spec.hf_config import model_from_hf_config
from scaleacross_milp.spec.model import ModelSpec

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.config.json").read_text())


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b", "deepseek-v3", "llama4-maverick"])
def test_published_config_matches_model_file(name: str) -> None:
    converted = model_from_hf_config(fixture(name), name=name)
    expected = ModelSpec.model_validate(json.loads((MODELS_DIR / f"{name}.json").read_text()))
    assert converted.model_dump() == expected.model_dump()
    assert converted.moe_layer_indices() == expected.moe_layer_indices()


def test_missing_key_names_key_and_model_type() -> None:
    config = fixture("llama3-8b")
    del config["hidden_size"]
    with pytest.raises(ValueError, match="hidden_size") as err:
        model_from_hf_config(config, name="broken")
    assert "'llama'" in str(err.value)


def test_all_missing_keys_reported_with_nesting() -> None:
    config = fixture("llama4-maverick")
    del config["text_config"]["num_hidden_layers"]
    del config["text_config"]["vocab_size"]
    with pytest.raises(ValueError, match="text_config.num_hidden_layers, text_config.vocab_size"):
        model_from_hf_config(config, name="broken")


def test_moe_without_top_k_is_rejected() -> None:
    config = fixture("mixtral-8x7b")
    del config["num_experts_per_tok"]
    with pytest.raises(ValueError, match="num_experts_per_tok") as err:
        model_from_hf_config(config, name="broken")
    assert "'mixtral'" in str(err.value)


def test_non_object_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        model_from_hf_config([1, 2], name="broken")  # type: ignore[arg-type]


def test_kv_heads_default_to_heads() -> None:
    config = fixture("llama3-8b")
    del config["num_key_value_heads"]
    assert model_from_hf_config(config, name="mha").kv_heads == 32


def test_gpt2_style_keys() -> None:
    config = {
        "model_type": "gpt2",
        "n_layer": 96,
        "n_embd": 12288,
        "n_head": 96,
        "n_inner": None,
        "vocab_size": 50257,
    }
    spec = model_from_hf_config(config, name="gpt3-175b")
    expected = ModelSpec.model_validate(json.loads((MODELS_DIR / "gpt3-175b.json").read_text()))
    assert spec == expected


def test_deepseek_moe_layer_freq_gives_explicit_layers() -> None:
    config = fixture("deepseek-v3") | {
        "num_hidden_layers": 8,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 2,
    }
    spec = model_from_hf_config(config, name="sparse")
    assert spec.moe_layer_indices() == [2, 4, 6]


def test_qwen2_moe_shared_expert_and_sparse_step() -> None:
    config = {
        "model_type": "qwen2_moe",
        "num_hidden_layers": 24,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    }
    spec = model_from_hf_config(config, name="qwen1.5-moe-a2.7b")
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.top_k, spec.moe.shared_experts) == (60, 4, 4)
    assert spec.moe_layer_indices() == list(range(24))
    config["mlp_only_layers"] = [0]
    assert model_from_hf_config(config, name="q").moe_layer_indices() == list(range(1, 24))
