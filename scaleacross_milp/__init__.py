"""scaleacross-milp: optimal layouts for LLM training across data-center buildings."""

__version__ = "0.1.0"
