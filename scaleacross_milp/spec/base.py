"""Common base for every JSON contract model: unknown fields are errors, values are validated on assignment."""

from pydantic import BaseModel, ConfigDict


class Contract(BaseModel):
    """Strict pydantic base: extra fields are forbidden so typos in instance files are reported, not ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
