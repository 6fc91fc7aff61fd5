"""Fixtures of the mod package tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def mods_dir(tmp_path: Path) -> Path:
    d = tmp_path / "mods"
    d.mkdir()
    return d
