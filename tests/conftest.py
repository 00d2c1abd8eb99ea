"""Helpers shared by the CLI tests of every package."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def _assert_input_error(result, *needles: str) -> None:
    """A CliRunner result for bad input: exit code 2, no traceback, and every needle in stderr."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.fixture
def assert_input_error() -> Callable[..., None]:
    return _assert_input_error
