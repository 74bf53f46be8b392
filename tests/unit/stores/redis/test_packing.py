"""The fast packer sends what redis-py's packer sends, byte for byte, or leaves it to it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from cronrace.stores.redis import packing
from cronrace.stores.redis.packing import FastConnection, pack

REDIS_PY = Connection()
FAST = FastConnection()

arguments = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    st.integers(min_value=-(2**70), max_value=2**70),
)


def redis_py(args: tuple[Any, ...]) -> bytes:
    return b"".join(REDIS_PY.pack_command(*args))


@given(st.sampled_from(["SET", "EVALSHA", "GET", "EXISTS", "WAIT", "XADD"]), st.lists(arguments))
def test_the_same_bytes_as_redis_py(name: str, rest: list[Any]) -> None:
    args = (name, *rest)
    assert pack(args) == redis_py(args)
    assert b"".join(FAST.pack_command(*args)) == redis_py(args)
    # Kept strings are packed the same the second time.
    assert pack(args) == redis_py(args)


@given(st.lists(st.tuples(st.sampled_from(["SET", "GET"]), arguments, arguments), max_size=5))
def test_pipelines_the_same_bytes_as_redis_py(commands: list[tuple[Any, ...]]) -> None:
    assert b"".join(FAST.pack_commands(commands)) == b"".join(REDIS_PY.pack_commands(commands))


@pytest.mark.parametrize(
    "args",
    [
        ("SET", "k", 1.5),  # floats: redis-py's repr
        ("CONFIG GET", "maxmemory"),  # a command name with a space is split
        ("SET", "k", memoryview(b"v")),
        ("SET", "k", bytearray(b"v")),
    ],
)
def test_other_arguments_are_left_to_redis_py(args: tuple[Any, ...]) -> None:
    assert pack(args) is None
    assert b"".join(FAST.pack_command(*args)) == redis_py(args)


def test_a_bool_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(DataError):
        FAST.pack_command("SET", "k", True)


def test_the_kept_encodings_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "KEPT_MAX", 4)
    monkeypatch.setattr(packing, "_kept", {})
    for index in range(10):
        args = ("SET", f"key:{index}", "v")
        assert pack(args) == redis_py(args)
        assert len(packing._kept) <= 4
