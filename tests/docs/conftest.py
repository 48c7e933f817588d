"""The documentation site, built once for the tests that read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from docsite.build import build_site


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built strictly, as ``make docs`` builds it (a warning would fail it)."""
    folder = tmp_path_factory.mktemp("site")
    build_site(folder)
    return folder
