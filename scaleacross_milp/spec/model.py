"""Transformer architecture: dense and mixture-of-experts (MoE) decoder-only models."""

from __future__ import annotations

from pydantic import Field, PositiveInt, model_validator

from scaleacross_milp.spec.base import Contract

MAX_LAYERS = 10_000
"""Far beyond any published model (the largest have about 200 layers); shape enumeration walks the layer count."""


class MoE(Contract):
    """Mixture-of-experts feed-forward blocks.

    `moe_layers` lists the 0-based indices of MoE layers; omitted means every layer from
    `first_dense_layers` on, every `moe_layer_interval`-th layer, is MoE.
    """

    experts: PositiveInt
    top_k: PositiveInt
    expert_ffn_hidden: PositiveInt
    shared_experts: int = Field(0, ge=0)
    first_dense_layers: int = Field(0, ge=0)
    moe_layer_interval: PositiveInt = 1
    moe_layers: list[int] | None = None

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoE:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        return self


class ModelSpec(Contract):
    """A decoder-only transformer. `ffn_hidden` is the dense FFN width (SwiGLU when `gated_ffn`)."""

    name: str
    layers: PositiveInt = Field(le=MAX_LAYERS)
    hidden: PositiveInt
    ffn_hidden: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt
    vocab: PositiveInt
    head_dim: PositiveInt | None = None
    gated_ffn: bool = True
    tied_embeddings: bool = False
    moe: MoE | None = None

    @model_validator(mode="after")
    def _consistent_heads(self) -> ModelSpec:
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) is not a multiple of heads ({self.heads}); give head_dim")
        if self.moe is not None:
            bad = [i for i in self.moe_layer_indices() if not 0 <= i < self.layers]
            if bad:
                raise ValueError(f"moe.moe_layers has indices outside 0..{self.layers - 1}: {bad}")
        return self

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def moe_layer_indices(self) -> list[int]:
        """0-based indices of the MoE layers (empty for a dense model)."""
        if self.moe is None:
            return []
        if self.moe.moe_layers is not None:
            return sorted(self.moe.moe_layers)
        start, step = self.moe.first_dense_layers, self.moe.moe_layer_interval
        return [i for i in range(start, self.layers) if (i - start) % step == step - 1]
