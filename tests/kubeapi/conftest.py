"""Makes the kubeapi fixtures available to these tests even when the root conftest does not
register `tests.kubeapi.fixtures` (pytest allows `pytest_plugins` only in the root conftest)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Registering twice would define every fixture twice (two session servers); skip if the root
    # conftest already did it.
    if not config.pluginmanager.has_plugin("tests.kubeapi.fixtures"):
        config.pluginmanager.import_plugin("tests.kubeapi.fixtures")
