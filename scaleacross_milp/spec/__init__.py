"""The JSON contract: pydantic models for instances and plans."""
