"""Price a published row the way `scaleacross-milp evaluate` prices a layout and compare with the paper."""

from __future__ import annotations

from dataclasses import dataclass

from scaleacross_milp.fidelity.convert import to_instance, to_layout
from scaleacross_milp.fidelity.metrics import metric_value
from scaleacross_milp.fidelity.rows import PublishedRow
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.plan import Verification
from scaleacross_milp.verify.verifier import verify


@dataclass(frozen=True)
class RowPrediction:
    row: PublishedRow
    verification: Verification
    predicted: float

    @property
    def error(self) -> float:
        """(predicted - published) / published."""
        return self.predicted / self.row.value - 1


def predict(row: PublishedRow, gpu: GPUType | None = None) -> RowPrediction:
    """Replay the row's layout on its instance (verify.verifier.verify, as `evaluate` does) and convert the
    replayed iteration time into the row's metric; `gpu` replaces the row's GPU type (to fit its parameters)."""
    instance = to_instance(row)
    if gpu is not None:
        instance = instance.model_copy(update={"gpu_types": {row.gpu: gpu}})
    verification, _ = verify(instance, to_layout(row))
    return RowPrediction(row, verification, metric_value(row.metric, instance, row.gpus, verification.iteration_s))
