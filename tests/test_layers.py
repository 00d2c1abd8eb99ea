"""Data flows one way: spec -> calibration -> (loader) -> costmodel -> milp / verify -> baselines -> report, with
sweeps and batches above solve (the CLI on top). Each package may import only the packages and top-level modules
below it; the MILP and the verifier share the cost model, not each other's code. Below everything sit the runtime
helpers (RUNTIME), which import nothing of ours. Read from the source (every `import`, deferred ones inside functions
included)."""

from __future__ import annotations

import ast
from pathlib import Path

import scaleacross_milp

PACKAGE = Path(scaleacross_milp.__file__).parent
INPUT = {"spec", "calibration", "loader"}
RUNTIME = {"gcpause"}
BELOW: dict[str, set[str]] = {
    "spec": set(),
    "calibration": {"spec"},
    "costmodel": {"spec", "calibration"},
    "milp": {"spec", "calibration", "costmodel"},
    "verify": {"spec", "calibration", "costmodel"},
    "fidelity": INPUT | {"costmodel", "verify"},
    "baselines": INPUT | {"costmodel", "milp", "verify"},
    "report": INPUT | {"costmodel", "milp", "verify", "baselines"},
    "sweep": INPUT,
    "batch": INPUT | {"costmodel", "milp", "verify", "baselines", "report", "sweep"},
}


def imported_packages(path: Path) -> set[str]:
    """The scaleacross_milp sub-packages (or top-level modules) that the module at `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found |= {name.split(".")[1] for name in names if name.startswith("scaleacross_milp.")}
    return found


def test_every_package_imports_only_the_packages_below_it():
    upward = []
    for package, allowed in BELOW.items():
        for path in sorted((PACKAGE / package).rglob("*.py")):
            for target in sorted(imported_packages(path) - allowed - RUNTIME - {package}):
                upward.append(f"{path.relative_to(PACKAGE)} imports scaleacross_milp.{target}")
    assert not upward, "\n".join(upward)


def test_every_package_is_placed_in_the_flow():
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert packages == set(BELOW), "place every package in BELOW"


def test_the_formulation_reads_no_bound():
    # The MILP's rows and the search's bounds share the shape context; the bounds the search proves enter a model
    # through build.Floors, so formulation/ never imports milp.bounds (nor the search above it).
    reach = []
    for path in sorted((PACKAGE / "milp" / "formulation").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in ("scaleacross_milp.milp.bounds",
                                                                    "scaleacross_milp.milp.solve"):
                reach.append(f"{path.relative_to(PACKAGE)} imports {node.module}")
    assert not reach, "\n".join(reach)


def test_the_runtime_helpers_import_nothing_of_ours():
    reach = {name: imported_packages(PACKAGE / f"{name}.py") for name in RUNTIME}
    assert not any(reach.values()), reach
