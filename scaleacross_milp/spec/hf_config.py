"""Convert a Hugging Face `config.json` dict into a `ModelSpec`.

Understood layouts:

* LLaMA / Mistral / Qwen / Gemma-style dense keys (`num_hidden_layers`, `hidden_size`,
  `intermediate_size`, `num_attention_heads`, `num_key_value_heads`, `vocab_size`, `head_dim`,
  `tie_word_embeddings`), gated (SwiGLU-style) FFN unless the model type is a known plain-MLP one.
* GPT-2-style keys (`n_layer`, `n_embd`, `n_head`, `n_inner`): plain GELU FFN, MHA, tied embeddings
  by default.
* MoE: Mixtral / Llama 4 (`num_local_experts`), DeepSeek-V2/V3 (`n_routed_experts`, `n_shared_experts`,
  `moe_intermediate_size`, `first_k_dense_replace`, `moe_layer_freq`), Qwen-MoE (`num_experts`,
  `decoder_sparse_step`, `mlp_only_layers`, `shared_expert_intermediate_size`). Llama 4 has one
  always-on shared expert per MoE layer and places MoE every `interleave_moe_layer_step`-th layer
  (or at explicit `moe_layers`); its dense layers use `intermediate_size_mlp`, its experts
  `intermediate_size`. Multimodal configs are read from their nested `text_config`.

Approximations: DeepSeek multi-head latent attention (MLA) is modelled as plain multi-head attention
with `num_key_value_heads` KV heads and `head_dim = v_head_dim` (128 heads x 128 for DeepSeek-V3),
ignoring the low-rank q/kv projections and the 64-dim decoupled RoPE part; DeepSeek's multi-token
prediction layers (`num_nextn_predict_layers`) are not counted. A Qwen-MoE shared expert of width
`shared_expert_intermediate_size` counts as that width divided by `moe_intermediate_size` (rounded
up) experts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scaleacross_milp.spec.model import ModelSpec, MoE

# Model types that use llama-style keys but a plain (non-gated) two-matrix MLP.
_PLAIN_MLP_TYPES = frozenset({"gpt_neox", "phi", "starcoder2"})


def model_from_hf_config(config: dict[str, Any], name: str) -> ModelSpec:
    """Build a `ModelSpec` named `name` from a parsed Hugging Face `config.json`.

    Raises ValueError naming the missing key(s) and the config's `model_type` when the
    architecture cannot be read.
    """
    if not isinstance(config, dict):
        raise ValueError(f"a Hugging Face config.json must be a JSON object, got {type(config).__name__}")
    nested = isinstance(config.get("text_config"), dict)
    cfg: dict[str, Any] = config["text_config"] if nested else config
    model_type = str(config.get("model_type") or cfg.get("model_type") or "unknown")
    prefix = "text_config." if nested else ""

    def require(*keys: str) -> list[Any]:
        missing = [key for key in keys if cfg.get(key) is None]
        if missing:
            listed = ", ".join(prefix + key for key in missing)
            raise ValueError(
                f"cannot convert Hugging Face config (model_type '{model_type}'): "
                f"missing required key(s) {listed}"
            )
        return [cfg[key] for key in keys]

    if "n_embd" in cfg:  # GPT-2 / GPT-J style
        layers, hidden, heads, vocab = require("n_layer", "n_embd", "n_head", "vocab_size")
        return ModelSpec(
            name=name,
            layers=layers,
            hidden=hidden,
            ffn_hidden=cfg.get("n_inner") or 4 * hidden,
            heads=heads,
            kv_heads=heads,
            vocab=vocab,
            head_dim=cfg.get("head_dim"),
            gated_ffn=False,
            tied_embeddings=cfg.get("tie_word_embeddings", True),
        )

    layers, hidden, intermediate, heads, vocab = require(
        "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"
    )
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        ffn_hidden=cfg.get("intermediate_size_mlp") or intermediate,
        heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads,
        vocab=vocab,
        head_dim=cfg.get("head_dim") or cfg.get("v_head_dim"),
        gated_ffn=model_type not in _PLAIN_MLP_TYPES,
        tied_embeddings=cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)),
        moe=_moe(cfg, model_type, layers, require),
    )


def _moe(cfg: dict[str, Any], model_type: str, layers: int, require: Callable[..., list[Any]]) -> MoE | None:
    """The MoE block of a config, or None for a dense model."""
    experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts")
    if not experts:
        return None
    (top_k,) = require("num_experts_per_tok")
    expert_ffn = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    if model_type.startswith("llama4"):
        shared = 1
    elif cfg.get("shared_expert_intermediate_size"):
        shared = -(-cfg["shared_expert_intermediate_size"] // expert_ffn)
    else:
        shared = cfg.get("n_shared_experts") or 0
    return MoE(
        experts=experts,
        top_k=top_k,
        expert_ffn_hidden=expert_ffn,
        shared_experts=shared,
        **_placement(cfg, layers),
    )


def _placement(cfg: dict[str, Any], layers: int) -> dict[str, Any]:
    """MoE layer placement as `first_dense_layers`/`moe_layer_interval` when that describes it exactly,
    else as an explicit `moe_layers` list."""
    if cfg.get("moe_layers") is not None:
        return {"moe_layers": sorted(cfg["moe_layers"])}
    first = cfg.get("first_k_dense_replace") or 0
    freq = cfg.get("moe_layer_freq") or 1
    step = cfg.get("interleave_moe_layer_step") or cfg.get("decoder_sparse_step") or 1
    dense_only = set(cfg.get("mlp_only_layers") or ())
    indices = [
        i
        for i in range(layers)
        if i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in dense_only
    ]
    if indices == [i for i in range(first, layers) if (i - first) % step == step - 1]:
        return {"first_dense_layers": first, "moe_layer_interval": step}
    return {"moe_layers": indices}
