"""Reading cost tables in tests."""

from scaleacross_milp.costmodel.costs import GPUCosts, ShapeCosts


def sole(costs: ShapeCosts) -> GPUCosts:
    """The cost table of an instance whose buildings all price alike (one pricing class)."""
    (gpu,) = costs.per_class.values()
    return gpu
