"""Stored schedules: changes all or nothing, a version per change, a notice per write."""

from __future__ import annotations

import pytest

from cronrace.stores.contract import Store
from cronrace.stores.values import ScheduleChange
from tests.stores.harness import Backend


def put(
    op: str, name: str, body: bytes = b'{"schedule":"* * * * *","handler":"h"}'
) -> ScheduleChange:
    return ScheduleChange(op, name, body if op != "remove" else b"")


async def test_each_change_counts_one_version_from_a_clock_seeded_start(store: Store) -> None:
    reply = await store.schedules.write([put("add", "a"), put("add", "b")])
    assert reply.status == "ok"
    assert reply.last_version == reply.first_version + 1
    assert reply.first_version > 10**15  # seeded from the server's clock in microseconds
    stored = await store.schedules.read_all()
    assert stored.version == reply.last_version
    assert set(stored.definitions) == {"a", "b"}
    reply = await store.schedules.write([put("remove", "a"), put("update", "b", b"{}")])
    assert (reply.first_version, reply.last_version) == (stored.version + 1, stored.version + 2)
    version, found = await store.schedules.read(["a", "b"])
    assert (version, found) == (reply.last_version, {"a": None, "b": b"{}"})
    assert await store.schedules.version() == reply.last_version


@pytest.mark.parametrize(
    ("batch", "status", "name"),
    [
        ([put("add", "new"), put("add", "kept")], "exists", "kept"),
        ([put("put", "new"), put("update", "absent")], "missing", "absent"),
        ([put("add", "new"), put("remove", "absent")], "missing", "absent"),
    ],
)
async def test_a_refused_batch_writes_nothing(
    store: Store, batch: list[ScheduleChange], status: str, name: str
) -> None:
    await store.schedules.write([put("add", "kept")])
    before = await store.schedules.read_all()
    reply = await store.schedules.write(batch)
    assert (reply.status, reply.name) == (status, name)
    assert await store.schedules.read_all() == before


async def test_every_write_leaves_a_notice_on_the_control_stream(store: Store) -> None:
    position = await store.control_position()
    reply = await store.schedules.write([put("add", "a"), put("add", "b")])
    [(_, notice)] = await store.read_control(position, block_ms=1)
    assert notice == {
        "op": "schedules",
        "first": str(reply.first_version),
        "last": str(reply.last_version),
        "names": "a,b",
    }


async def test_a_lost_set_restarts_above_every_version_seen(store: Store, backend: Backend) -> None:
    reply = await store.schedules.write([put("add", "a")])
    await backend.faults.wipe_schedules()
    assert (await store.schedules.read_all()).version == 0
    again = await store.schedules.write([put("add", "a")])
    assert again.first_version > reply.last_version
