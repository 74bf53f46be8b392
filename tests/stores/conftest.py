"""Store tests run on fakeredis, a real redis-server and a real Redis Cluster."""

from __future__ import annotations

import pytest

from tests.conftest import url_for


@pytest.fixture(
    params=[
        "fake",
        pytest.param("real", marks=pytest.mark.redis),
        pytest.param("cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
    ]
)
def redis_url(request: pytest.FixtureRequest, namespace: str) -> str:
    """Every script and store command on fakeredis, one primary and a cluster."""
    return url_for(request, namespace)
