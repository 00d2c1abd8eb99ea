"""Helpers shared by the tests of every package: the CLI's bad-input check and a small-instance builder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from scaleacross_milp.spec.instance import Instance

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
A100 = {"peak_dense_tflops": {"bf16": 312}, "hbm_gib": 79.2, "hbm_tbyte_s": 2.0, "nvlink_domain_gpus": 8,
        "nvlink_gbyte_s": 230, "nic_gbit_s": 200}
B200 = {"peak_dense_tflops": {"bf16": 2250}, "hbm_gib": 180, "hbm_tbyte_s": 8.0, "nvlink_domain_gpus": 8,
        "nvlink_gbyte_s": 900, "nic_gbit_s": 400}
H100 = {"peak_dense_tflops": {"bf16": 989}, "hbm_gib": 79.6, "hbm_tbyte_s": 3.35,
        "nvlink_domain_gpus": 8, "nvlink_gbyte_s": 370, "nic_gbit_s": 400}


def _assert_input_error(result, *needles: str) -> None:
    """A CliRunner result for bad input: exit code 2, no traceback, and every needle in stderr."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.fixture
def shared_data() -> Callable[[str], Path]:
    """The path of a file or folder in the shared data folder next to the repository; skips the test without it."""

    def find(relative: str) -> Path:
        path = SHARED_DATA / relative
        if not path.exists():
            pytest.skip(f"{path} not present (the shared data folder next to the repository)")
        return path

    return find


@pytest.fixture
def assert_input_error() -> Callable[..., None]:
    return _assert_input_error


def _small_instance(buildings=None, links=None, search=None, *, gpus: int, batch: int, search_defaults: dict,
                    gpu_types: dict | None = None, **training) -> Instance:
    """A Llama 3 8B job on H100s, from keyword overrides (one building of `gpus` GPUs unless given); buildings may
    also name the `a100` and `b200` types (datasheet figures above) or types of their own in `gpu_types`."""
    data = {
        "name": "tiny",
        "model": json.loads((ROOT / "models" / "llama3-8b.json").read_text()),
        "training": {"seq_len": 8192, "global_batch_sequences": batch, "recompute": "selective", **training},
        "gpu_types": {"h100": H100, "a100": A100, "b200": B200, **(gpu_types or {})},
        "topology": {"buildings": buildings or [{"name": "A", "gpus": gpus, "gpu_type": "h100"}],
                     "links": links or []},
        "search": {**search_defaults, **(search or {})},
    }
    return Instance.model_validate(data)


@pytest.fixture
def small_instance() -> Callable[..., Instance]:
    return _small_instance
