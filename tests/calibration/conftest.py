"""The 21 real nccl-tests logs (../shared/data/nccl-tests from the repository root)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def logs(shared_data) -> Path:
    return shared_data("nccl-tests")
