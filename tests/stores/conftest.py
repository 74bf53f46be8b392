"""Stores under test: one deployment per backend and test session, one namespace per test.

A deployment (a server and the connections to it) is opened once per session and shared
by every test on it, each test in a namespace of its own. Its connections belong to one
event loop, so the tests that use one run in the session's loop, and so do their async
fixtures (``loop_scope="session"``).
"""

from __future__ import annotations

import pytest
from pytest_asyncio import is_async_test


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if is_async_test(item) and "deployment" in getattr(item, "fixturenames", ()):
            item.add_marker(session_loop, append=False)
