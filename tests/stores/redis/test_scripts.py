"""The Lua scripts as Redis holds them: a flushed script cache, and errors named by line."""

from __future__ import annotations

from importlib import resources

from cronrace.errors import StoreError
from cronrace.stores.redis import Store
from cronrace.stores.values import AcquireReply, AcquireRequest, Owner, Renewal
from tests.stores.contract.helpers import request


async def test_noscript_is_handled_by_reloading_also_in_pipelines(store: Store) -> None:
    try:
        await store.client.script_flush()
        replies = await store.acquire([request(job="a", tick=100), request(job="b", tick=100)])
        assert [getattr(r, "decision", r) for r in replies] == ["run", "run"]
        await store.client.script_flush()
        first = replies[0]
        assert isinstance(first, AcquireReply)
        assert await store.renew("a", first.fence, 5000) == Renewal.RENEWED
    finally:
        await store.prepare()  # the server is shared: leave its cache as it was found


async def test_a_script_error_names_the_line_of_the_file_we_ship(store: Store) -> None:
    """Redis numbers the lines of _lib.lua and the script joined; the error is mapped back."""
    source = resources.files("cronrace.stores.redis.lua").joinpath("acquire.lua").read_text()
    line = 1 + source.splitlines().index("  if prev >= decide_tick then")
    bad = AcquireRequest("j", "not-a-tick", 1, 1, Owner("n1", "x"), 5000, "skip", "run")  # type: ignore[arg-type]
    (reply,) = await store.acquire([bad])
    assert isinstance(reply, StoreError)
    assert f"acquire.lua:{line}:" in str(reply)
    assert "job 'j'" in str(reply)
