"""A planning instance: model, training, hardware, topology and search options (read by `scaleacross_milp.loader`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, model_validator

from scaleacross_milp.spec.base import Contract
from scaleacross_milp.spec.hardware import GPUType
from scaleacross_milp.spec.hf_config import model_from_hf_config
from scaleacross_milp.spec.jsonfile import FileProblems, error_lines, read_json, validate_json
from scaleacross_milp.spec.model import ModelSpec
from scaleacross_milp.spec.search import DEFAULT_DP_MODES, DPMode, Objective, SearchOptions
from scaleacross_milp.spec.topology import Topology
from scaleacross_milp.spec.training import Training


class ModelFile(Contract):
    """A model given by file, relative to the instance file: our JSON (`file`) or a Hugging Face
    `config.json` (`hf_config`, converted; `name` labels it)."""

    file: str | None = None
    hf_config: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelFile:
        if (self.file is None) == (self.hf_config is None):
            raise ValueError("give exactly one of file or hf_config")
        return self

    def load(self, base_dir: Path) -> ModelSpec:
        """The referenced model; FileProblems names the model file."""
        path = base_dir / (self.file or self.hf_config)
        data = read_json(path)
        if self.file is not None:
            return validate_json(ModelSpec, data, path)
        try:
            return model_from_hf_config(data, name=self.name or path.parent.name or path.stem)
        except ValueError as exc:
            raise FileProblems(path, error_lines(exc)) from None


INLINE_MODEL_TAG, MODEL_FILE_TAG = "<inline model>", "<model file>"
"""Tags of the `model` union, in angle brackets so error_lines leaves them out of field paths."""


def _model_kind(value: Any) -> str:
    """Which model contract a `model` value is: a file reference when it names `file` or `hf_config`."""
    if isinstance(value, ModelFile) or (isinstance(value, dict) and ("file" in value or "hf_config" in value)):
        return MODEL_FILE_TAG
    return INLINE_MODEL_TAG


ModelField = Annotated[
    Annotated[ModelSpec, Tag(INLINE_MODEL_TAG)] | Annotated[ModelFile, Tag(MODEL_FILE_TAG)],
    Discriminator(_model_kind),
]
"""An inline model or a file reference, told apart by its keys so a bad field is reported once, for the kind
given (the tags are dropped from error paths by error_lines)."""


class Instance(Contract):
    name: str
    description: str = ""
    model: ModelField
    training: Training
    gpu_types: dict[str, GPUType] = Field(min_length=1)
    topology: Topology
    search: SearchOptions = Field(default_factory=SearchOptions)
    collective_profile: str | None = Field(
        None,
        description="calibrated collective profile: a bundled name (scaleacross_milp/calibration/profiles/) or "
        "a profile JSON path relative to the instance file; None: the bundled 'default'",
    )

    @model_validator(mode="before")
    @classmethod
    def _zero1_searched_for_megatron_jobs(cls, data: Any) -> Any:
        """search.dp_modes left out and training.overlap_param_gather on (a job running Megatron's distributed
        optimizer): the default modes and zero1 (`spec.search.DEFAULT_DP_MODES`)."""
        if not isinstance(data, dict) or not isinstance(data.get("training"), dict | Training):
            return data
        training, search = data["training"], data.get("search", {})
        gathers = (training.get("overlap_param_gather") if isinstance(training, dict)
                   else training.overlap_param_gather)
        if gathers is not True or not isinstance(search, dict) or "dp_modes" in search:
            return data
        return {**data, "search": {**search, "dp_modes": [*DEFAULT_DP_MODES, DPMode.zero1]}}

    @model_validator(mode="after")
    def _gpu_types_known(self) -> Instance:
        for i, building in enumerate(self.topology.buildings):
            if building.gpu_type not in self.gpu_types:
                raise ValueError(
                    f"topology.buildings[{i}] ('{building.name}') uses gpu_type '{building.gpu_type}', "
                    f"not defined in gpu_types {sorted(self.gpu_types)}"
                )
            precision = self.training.precision
            if precision not in self.gpu_types[building.gpu_type].peak_dense_tflops:
                raise ValueError(
                    f"gpu_types['{building.gpu_type}'].peak_dense_tflops has no entry for the training "
                    f"precision '{precision.value}'"
                )
        return self

    @model_validator(mode="after")
    def _prices_complete(self) -> Instance:
        """Once a price, a cost objective or a budget is given, every building has a GPU-hour price (its own or its
        type's): a plan's cost would otherwise leave the building's GPUs out."""
        search, buildings = self.search, self.topology.buildings
        prices = [*(b.gpu_hour_usd for b in buildings), *(g.gpu_hour_usd for g in self.gpu_types.values()),
                  *(link.egress_usd_per_gb for link in self.topology.links)]
        if search.objective is Objective.cost:
            why = "search.objective is 'cost'"
        elif search.max_cost_per_iteration is not None:
            why = "search.max_cost_per_iteration is given"
        elif any(price is not None for price in prices):
            why = "prices are given"
        else:
            return self
        for i, building in enumerate(buildings):
            if building.gpu_hour_usd is None and self.gpu_types[building.gpu_type].gpu_hour_usd is None:
                raise ValueError(
                    f"topology.buildings[{i}].gpu_hour_usd: building '{building.name}' has no GPU-hour price (nor "
                    f"has gpu_types['{building.gpu_type}'].gpu_hour_usd); {why}, so every building needs one")
        return self

    @property
    def model_spec(self) -> ModelSpec:
        if not isinstance(self.model, ModelSpec):
            raise TypeError("instance model is an unresolved file reference; use load_instance()")
        return self.model

    def gpu_type_of(self, building: str) -> GPUType:
        return self.gpu_types[self.topology.building(building).gpu_type]
