from __future__ import annotations

from typing import Any

import pytest

from tests.acs.runtime import KEY_ID, SECRET, Runtime


@pytest.fixture(autouse=True)
def acs_settings(settings: Any) -> None:
    settings.ACS_HMAC_SECRET = SECRET
    settings.ACS_KEY_ID = KEY_ID
    settings.ACS_NAMESPACE = "acs"
    settings.ACS_ROOT_CHANNEL = ""


@pytest.fixture
def runtime(client: Any, db: None) -> Runtime:
    """A runtime whose session has said hello."""
    rt = Runtime(client)
    rt.hello()
    return rt
