"""The 21 real nccl-tests logs (../shared/data/nccl-tests from the repository root)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT.parent / "shared" / "data" / "nccl-tests"


@pytest.fixture
def logs() -> Path:
    if not LOGS.is_dir():
        pytest.skip(f"{LOGS} not present (the shared data folder next to the repository)")
    return LOGS
