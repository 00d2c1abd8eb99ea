"""Common base for every JSON contract model: unknown fields and non-finite numbers are errors, models are frozen."""

from pydantic import BaseModel, ConfigDict


class Contract(BaseModel):
    """Strict pydantic base: extra fields are forbidden so typos in instance files are reported, not ignored, and
    a number must be finite (JSON `Infinity`, `NaN` or an overflowing `1e309` is refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
