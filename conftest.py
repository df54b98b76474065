"""Loads every fixture module in tests/fixtures, so each area keeps its fixtures in its own file."""

import pathlib

import pytest

# Fixture modules import each other; registered first, each still gets pytest's assertion messages.
pytest.register_assert_rewrite("tests.fixtures", "tests.support")

pytest_plugins = sorted(
    f"tests.fixtures.{path.stem}"
    for path in (pathlib.Path(__file__).parent / "tests" / "fixtures").glob("*.py")
    if path.stem != "__init__"
)
