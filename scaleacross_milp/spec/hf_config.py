"""Placeholder replaced by the Hugging Face converter."""

from scaleacross_milp.spec.model import ModelSpec


def model_from_hf_config(config: dict, name: str) -> ModelSpec:
    raise ValueError("Hugging Face config conversion is not available yet")
