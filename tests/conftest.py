"""Helpers shared by the tests of every package: the CLI's bad-input check, a small-instance builder and the
bundled instances solved once per test session."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scaleacross_milp.loader import load_instance
from scaleacross_milp.milp.solve import solve_instance
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
BUNDLED = sorted(path.stem for path in (ROOT / "instances").glob("*.json"))
OWN_TIME_LIMIT = ("two-region-8b-131k-deepseek-v3", "two-region-8b-131k-llama3-405b")
"""Solved with their own time limit (search.time_limit_s, about 30 s each on 2 cores) and marked slow; the other
bundled instances with BUNDLED_TIME_LIMIT_S."""
BUNDLED_TIME_LIMIT_S = 15
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


@pytest.fixture(autouse=True)
def no_component_replaced() -> Iterator[None]:
    """Fail a test whose models give a Pyomo component a name already taken: Pyomo only warns and drops the first
    component's rows (the credit caps once replaced the pipeline's stage floors in every heterogeneous model)."""
    replaced: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: replaced.append(record.getMessage())
    handler.addFilter(lambda record: "Implicitly replacing" in record.getMessage())
    logger = logging.getLogger("pyomo.core")
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)
    assert not replaced, replaced[0]


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


def bundled_params(also_slow: tuple[str, ...] = ()) -> list:
    """The bundled instances' names as pytest parameters, the 131,072-GPU ones and `also_slow` marked slow."""
    return [pytest.param(name, marks=pytest.mark.slow) if name in OWN_TIME_LIMIT + also_slow else name
            for name in BUNDLED]


@pytest.fixture(scope="session")
def solved_bundled() -> Callable[[str], tuple[Instance, Plan]]:
    """name -> (instance, plan), solving each bundled instance once per test session (2 threads)."""
    plans: dict[str, tuple[Instance, Plan]] = {}

    def get(name: str) -> tuple[Instance, Plan]:
        if name not in plans:
            instance = load_instance(ROOT / "instances" / f"{name}.json")
            limit = None if name in OWN_TIME_LIMIT else BUNDLED_TIME_LIMIT_S
            plans[name] = instance, solve_instance(instance, time_limit_s=limit, threads=2)
        return plans[name]

    return get


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/bundled.json from this run's solves instead of comparing with it")
