"""Debian's Chromium, driven by Playwright, against the real pages on the live test server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chromium import CHROMIUM, CHROMIUM_ARGS

# Playwright's sync API runs an event loop in this thread; the tests' own ORM calls are plain
# synchronous code that merely shares the thread, so Django's async guard does not apply.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(10_000)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.dialogs = dialogs
    yield page
    context.close()


def sign_in(page: Any, email: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Inbox").wait_for()


@pytest.fixture(scope="session")
def asgi_server(django_db_setup: Any, django_db_blocker: Any, kube_server: Any) -> Iterator[str]:
    """The ASGI application (pages and websockets) in a daphne process of its own, sharing the
    test database and a Redis channel layer with the tests, as production shares them between
    its processes. PostgreSQL only: a forked server cannot share an in-memory SQLite database."""
    from functools import partial

    from channels.layers import channel_layers
    from channels.testing.live import make_application
    from daphne.testing import DaphneProcess
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from django.db import connections
    from django.test.utils import override_settings

    redis_url = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_url]},
        }
    }
    with override_settings(
        CHANNEL_LAYERS=layers,
        # The same hasher the tests create their users with (see fast_password_hashing).
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    ):
        channel_layers.backends = {}
        connections.close_all()  # never share an open database connection across fork()
        # fork() copies every open socket: a child holding the test API server's listening
        # socket would keep a "stopped" API server reachable (and its port taken). Stop it
        # around the fork; it comes back on the same port with its objects.
        kube_server.stop()
        process = DaphneProcess(
            "127.0.0.1",
            partial(make_application, static_wrapper=ASGIStaticFilesHandler),
            # The forked server inherits pytest-django's guard against stray database access.
            setup=django_db_blocker.unblock,
        )
        process.start()
        kube_server.start()
        assert process.ready.wait(30), "daphne did not start"
        try:
            yield f"http://127.0.0.1:{process.port.value}"
        finally:
            process.terminate()
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join(10)
            channel_layers.backends = {}
