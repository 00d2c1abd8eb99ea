"""Every model in models/ validates as a ModelSpec and carries the published architecture numbers."""

import json
from pathlib import Path

import pytest

from scaleacross_milp.spec.model import ModelSpec

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
MODEL_FILES = sorted(MODELS_DIR.glob("*.json"))


def load(name: str) -> ModelSpec:
    return ModelSpec.model_validate(json.loads((MODELS_DIR / f"{name}.json").read_text()))


def test_expected_models_present() -> None:
    names = {path.stem for path in MODEL_FILES}
    assert {
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "gpt3-175b",
        "mixtral-8x7b",
        "llama4-maverick",
        "deepseek-v3",
    } <= names


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_model_file_validates_and_is_named_after_file(path: Path) -> None:
    spec = ModelSpec.model_validate(json.loads(path.read_text()))
    assert spec.name == path.stem


def test_llama3_dense_models() -> None:
    for name, layers, hidden, ffn, heads in [
        ("llama3-8b", 32, 4096, 14336, 32),
        ("llama3-70b", 80, 8192, 28672, 64),
        ("llama3-405b", 126, 16384, 53248, 128),
    ]:
        spec = load(name)
        assert (spec.layers, spec.hidden, spec.ffn_hidden, spec.heads) == (layers, hidden, ffn, heads)
        assert spec.kv_heads == 8
        assert spec.vocab == 128256
        assert spec.attention_head_dim == 128
        assert spec.gated_ffn and not spec.tied_embeddings and spec.moe is None


def test_gpt3_is_mha_with_plain_gelu_ffn() -> None:
    spec = load("gpt3-175b")
    assert (spec.layers, spec.hidden, spec.ffn_hidden, spec.heads) == (96, 12288, 49152, 96)
    assert spec.kv_heads == spec.heads
    assert spec.vocab == 50257
    assert not spec.gated_ffn
    assert spec.moe is None


def test_mixtral_every_layer_is_moe() -> None:
    spec = load("mixtral-8x7b")
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.top_k, spec.moe.shared_experts) == (8, 2, 0)
    assert spec.moe.expert_ffn_hidden == 14336
    assert spec.moe_layer_indices() == list(range(32))


def test_llama4_maverick_alternates_dense_and_moe() -> None:
    spec = load("llama4-maverick")
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.top_k, spec.moe.shared_experts) == (128, 1, 1)
    assert (spec.ffn_hidden, spec.moe.expert_ffn_hidden) == (16384, 8192)
    assert spec.layers == 48
    assert spec.moe_layer_indices() == list(range(1, 48, 2))


def test_deepseek_v3_first_three_layers_dense() -> None:
    spec = load("deepseek-v3")
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.top_k, spec.moe.shared_experts) == (256, 8, 1)
    assert (spec.ffn_hidden, spec.moe.expert_ffn_hidden) == (18432, 2048)
    indices = spec.moe_layer_indices()
    assert len(indices) == 58 and indices[0] == 3 and indices[-1] == 60
    assert (spec.heads, spec.kv_heads, spec.attention_head_dim) == (128, 128, 128)
