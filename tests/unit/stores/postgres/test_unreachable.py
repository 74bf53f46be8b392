"""A PostgreSQL that cannot be reached: the cause named at once, start-up's timeout kept,
and psycopg-pool's own lines in cronrace's log rather than on stderr.

No server is needed: nothing listens on a free loopback port, so every connection is
refused (what a server that is down or not started yet answers).
"""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from cronrace import Agent, AgentSettings, StoreUnavailableError
from tests.redis_server import free_port

psycopg_pool = pytest.importorskip("psycopg_pool")


def refused_url() -> str:
    return f"postgresql://cronrace:secret@127.0.0.1:{free_port()}/app"


async def test_start_up_names_the_refusal_and_keeps_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = Agent(settings=AgentSettings(store_url=refused_url(), startup_timeout_s=0.5))
    left: list[str] = []

    async def leave(node_id: str) -> None:  # pragma: no cover - must not be called
        left.append(node_id)

    monkeypatch.setattr(agent.store, "leave", leave)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await agent.run()
    elapsed_s = time.monotonic() - started
    [line] = str(caught.value).splitlines()
    assert line.startswith("PostgreSQL at postgresql://***@127.0.0.1:")
    assert "unreachable for 0.5s at start-up; last error: cannot connect to PostgreSQL" in line
    assert "Connection refused" in line  # the cause, not "no answer"
    # A node that never reached the store has nothing to take back from it: no leave()
    # waiting its 2 s on a server that is not there (it took 3.1 s for a 1 s timeout).
    assert left == []
    assert elapsed_s < 0.5 + 1.5


async def test_a_call_fails_at_once_naming_the_cause_while_no_connection_can_be_made() -> None:
    """The pool retries in the background; a call does not wait its timeout_s for it."""
    settings = AgentSettings(store_url=refused_url(), redis_timeout_s=30.0)
    agent = Agent(settings=settings)
    try:
        with anyio.fail_after(10):  # far below timeout_s: the call did not wait for it
            with pytest.raises(StoreUnavailableError, match="Connection refused") as caught:
                await agent.nodes()
    finally:
        await agent.aclose()
    assert "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)


async def test_the_pool_s_lines_go_to_cronrace_s_log_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    agent = Agent(settings=AgentSettings(store_url=refused_url()))
    try:
        with pytest.raises(StoreUnavailableError):
            await agent.nodes()
    finally:
        await agent.aclose()
    assert [r for r in caplog.records if r.name.startswith("psycopg.pool")] == []
    ours = [r for r in caplog.records if r.name == "cronrace.stores.postgres"]
    assert any(
        r.levelno == logging.DEBUG
        and r.getMessage().startswith("connection pool: error connecting")
        for r in ours
    )


async def test_the_program_s_own_pools_keep_their_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only cronrace's pools are rerouted: a pool of the host program still logs as before."""
    Agent(settings=AgentSettings(store_url=refused_url()))  # installs cronrace's filter
    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    pool = psycopg_pool.AsyncConnectionPool(
        f"postgresql://127.0.0.1:{free_port()}/app", open=False, name="host-app"
    )
    try:
        # Its first attempt is refused at once; waiting for it to fill gives up after 1 s.
        with pytest.raises(psycopg_pool.PoolTimeout):
            await pool.open(wait=True, timeout=1.0)
    finally:
        await pool.close()
    assert "host-app" in next(r for r in caplog.records if r.name == "psycopg.pool").getMessage()
